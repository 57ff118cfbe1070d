"""An adopted llama.cpp runtime's identity, admission and instance ids, via `open_runtime`.

Seed-behaviour checklist items 1, 17, 18, 19 and 31 (the runtime's id, its LAN exposure,
admission that is read-only, refuses a port outside the allowed range before any request
and a dead port, and registers nothing) and 28 to 30 (a node id is a plain token, the
instance id follows the reference formula, adopted instances may share an address). The
fake llama-server answers through ``httpx.MockTransport`` under MockClock; the dead-port
test uses a real loopback port.
"""

from __future__ import annotations

import platform
import re

import pytest
import trio
import trio.testing

from actors.adopted_support import PORT, FakeLlama, adopted, chat, errors_in, expected_id
from inferactors import (
    AdmissionRefused,
    ControlMode,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InvalidConfig,
    InvalidState,
    NetworkExposure,
    ServeArgs,
    open_runtime,
)

# Identity, exposure, admission (items 1, 17, 18, 19, 31).


async def test_the_adopted_runtime_names_itself_and_reports_lan_exposure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        assert runtime.id == "infer.llamacpp.adopted"
        assert runtime.control_mode is ControlMode.ADOPTED
        assert runtime.network_exposure is NetworkExposure.LAN
        handle = await runtime.load(chat())
        assert handle.runtime == "infer.llamacpp.adopted"
        assert handle.workload_id == "chat"


async def test_a_port_outside_the_allowed_range_is_refused_before_any_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, allowed_ports=(9000, 9010)) as runtime:
        for port in (8999, 9011):
            with pytest.raises(AdmissionRefused, match=f"port {port} .*allowed range 9000-9010"):
                await runtime.admit(chat(port))
            with pytest.raises(AdmissionRefused, match="allowed range"):
                await runtime.load(chat(port))
        assert server.requests == []
        assert await runtime.instances() == ()
        await runtime.admit(chat(9010))  # the range is inclusive
        assert server.requests


async def test_admitting_a_dead_port_is_refused_and_registers_nothing(free_port: int) -> None:
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        want = f"no infer.llamacpp server answering at http://127.0.0.1:{free_port}: "
        with pytest.raises(AdmissionRefused, match=re.escape(want)):
            await runtime.admit(chat(free_port))
        with pytest.raises(AdmissionRefused, match=re.escape(want)):
            await runtime.load(chat(free_port))
        assert await runtime.instances() == ()


async def test_admit_is_read_only_and_its_notes_start_with_the_endpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(models=("a.gguf", "b.gguf"))
    async with adopted(server) as runtime:
        admission = await runtime.admit(chat())
        assert admission.runtime == "infer.llamacpp.adopted"
        assert admission.arch == platform.machine()
        assert admission.notes[0] == f"endpoint http://127.0.0.1:{PORT}"
        assert "2 model(s) listed" in admission.notes
        assert await runtime.instances() == ()
        assert server.methods == {"GET"}


# Node id, instance id, shared addresses (items 28, 29, 30).


async def test_a_node_id_must_be_a_plain_token_of_at_most_64_chars(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for bad in ("bad id", "", "x" * 65, "-lead", "a/b"):
        try:
            async with adopted(FakeLlama(), node_id=bad):
                pytest.fail(f"node id {bad!r} was accepted")
        except (InvalidConfig, ExceptionGroup) as error:  # the xfail below: only the first
            refused: BaseException = error
        assert any(
            isinstance(error, InvalidConfig) and "node id must be a plain token" in str(error)
            for error in errors_in(refused)
        ), refused
    async with adopted(FakeLlama(), node_id="n" * 64) as runtime:
        assert (await runtime.load(chat())).instance_id.endswith("-" + "n" * 64)


async def test_open_runtime_raises_invalid_config_itself_for_a_bad_node_id() -> None:
    with pytest.raises(InvalidConfig, match="node id"):
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP), node_id="bad id"):
            pass


async def test_an_error_raised_inside_the_runtime_block_comes_out_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(KeyError):
        async with adopted(FakeLlama()):
            raise KeyError("the caller's own error")


async def test_the_instance_id_follows_the_reference_formula(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama(), node_id="node1") as runtime:
        handle = await runtime.load(chat())
        base = f"http://127.0.0.1:{PORT}"
        assert handle.instance_id == expected_id("chat", "tiny", base, "adopted", "node1")
        v6 = InferenceSpec(
            role="six", runtime=InferFlavor.LLAMACPP, serve=ServeArgs(host="::1", port=PORT)
        )
        six = await runtime.load(v6)
        assert six.instance_id == expected_id("six", "", f"http://[::1]:{PORT}", "adopted", "node1")
        with pytest.raises(InvalidState, match=f"{handle.instance_id} is already loaded"):
            await runtime.load(chat())
        assert [h.instance_id for h in await runtime.instances()] == [
            handle.instance_id,
            six.instance_id,
        ]


async def test_adopted_instances_may_share_an_address(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        first = await runtime.load(chat(role="first"))
        second = await runtime.load(chat(role="second"))
        assert first.instance_id != second.instance_id
        assert len(await runtime.instances()) == 2
        assert await runtime.endpoint(first) == await runtime.endpoint(second)
