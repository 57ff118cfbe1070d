"""The runtime API in adopted mode, for llama.cpp, through `open_runtime` only.

Seed-behaviour checklist items 1, 17 to 26, 28 to 31, 62, 71 and 72 (section 7, the
``WorkloadRuntime`` contract, and section 4). Most tests talk to a fake llama-server behind
``httpx.MockTransport`` that records every request, under ``MockClock(autojump_threshold=0)``;
the dead-port and "unload leaves the server alone" tests use real loopback sockets and a
real server process. Tests named after a bug guard its fix.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import blake3
import httpx
import pytest
import trio
import trio.testing

from inferactors import (
    AdmissionRefused,
    BackendError,
    ControlMode,
    DeepHealthTimeout,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InvalidConfig,
    InvalidState,
    NetworkExposure,
    ServeArgs,
    UnknownInstance,
    Unsupported,
    http_prober_factory,
    open_runtime,
)

HELPER = Path(__file__).parents[1] / "helpers" / "runtime_server.py"
PORT = 8123


@attrs.define(eq=False)
class FakeLlama:
    """A llama-server as seen through httpx: answers by its fields, records every request.

    ``hang`` names a path whose requests are held forever (``entered`` is set when one
    arrives), ``slow`` one whose answers take ``slow_s`` seconds; ``down`` makes every
    request fail to connect.
    """

    health: int = 200
    models: tuple[str, ...] = ("tiny.gguf",)
    models_status: int = 200
    completion: int = 200
    down: bool = False
    hang: str | None = None
    slow: str | None = None
    slow_s: float = 0.0
    entered: trio.Event = attrs.Factory(trio.Event)
    requests: list[httpx.Request] = attrs.Factory(list)

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]

    @property
    def methods(self) -> set[str]:
        return {request.method for request in self.requests}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path == self.hang:
            self.entered.set()
            await trio.sleep_forever()
        if request.url.path == self.slow:
            await trio.sleep(self.slow_s)
        return self._answer(request)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        match (request.method, request.url.path):
            case ("GET", "/health"):
                location = {"Location": "http://127.0.0.1:9/elsewhere"}
                return httpx.Response(self.health, json={"status": "ok"}, headers=location)
            case ("GET", "/v1/models"):
                data = [{"id": name, "object": "model"} for name in self.models]
                return httpx.Response(self.models_status, json={"object": "list", "data": data})
            case ("POST", "/v1/chat/completions"):
                message = {"role": "assistant", "content": " and"}
                choice = {"index": 0, "message": message, "finish_reason": "length"}
                return httpx.Response(self.completion, json={"choices": [choice]})
            case _:
                return httpx.Response(404, json={"error": "not found"})


def chat(port: int = PORT, *, role: str = "chat", model: str | None = "tiny") -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model=model, serve=ServeArgs(port=port)
    )


@asynccontextmanager
async def adopted(
    server: FakeLlama, *, node_id: str = "node1", **config: object
) -> AsyncIterator[InferRuntime]:
    settings = InferConfig.adopted(InferFlavor.LLAMACPP, **config)  # type: ignore[arg-type]
    prober = http_prober_factory(httpx.MockTransport(server.handle))
    async with open_runtime(settings, node_id=node_id, open_prober=prober) as runtime:
        yield runtime


def expected_id(role: str, model: str, base_url: str, mode: str, node: str) -> str:
    """Seed-behaviour section 4: role-<blake3(role+runtime+model+base_url+mode)[:8]>-node."""
    material = role + "infer.llamacpp" + model + base_url + mode
    return f"{role}-{blake3.blake3(material.encode()).hexdigest()[:8]}-{node}"


def errors_in(error: BaseException) -> list[BaseException]:
    """``error`` and, for an exception group, every leaf inside it."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in errors_in(inner)]
    return [error]


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


# What an adopted server receives (items 20, 21, 22).


async def test_an_adopted_server_only_ever_receives_get_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        await runtime.admit(chat())
        handle = await runtime.load(chat())
        await runtime.start(handle)
        await trio.sleep(5.0)  # the monitor probes meanwhile
        await runtime.status(handle)
        await runtime.health(handle)
        await runtime.unload(handle)
        seen = len(server.requests)
        await trio.sleep(30.0)
        assert len(server.requests) == seen, "requests arrived after unload"
    assert server.methods == {"GET"}
    assert {"/health", "/v1/models"} <= set(server.paths)
    assert server.paths.count("/health") > 5, "the monitor should have probed repeatedly"


async def test_adopted_start_of_a_gone_server_fails_and_stop_is_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises(Unsupported, match="is adopted: inferactors observes it and never"):
            await runtime.stop(handle)
        server.down = True
        with pytest.raises(BackendError) as refused:
            await runtime.start(handle)
        assert type(refused.value) is BackendError
        assert "not answering" in str(refused.value)
        assert "inferactors does not start adopted servers" in str(refused.value)
        with pytest.raises(Unsupported):
            await runtime.stop(handle, 0.0)
        assert (await runtime.status(handle)).state is InstanceState.EXITED
    assert server.methods == {"GET"}


@asynccontextmanager
async def own_server(tmp_path: Path, port: int) -> AsyncIterator[tuple[trio.Process, Path]]:
    """Our helper server, started by the test itself (not by inferactors) on ``port``.

    Yields the process and the file its request lines go to.
    """
    log = tmp_path / "requests.log"
    argv = [sys.executable, "-I", str(HELPER), "-m", "/m/tiny.gguf", "--host", "127.0.0.1"]
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            [*argv, "--port", str(port)], stdout=out, stderr=subprocess.DEVNULL, cwd=tmp_path
        )
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            with trio.fail_after(30):
                while not await _answers(client, port):  # noqa: ASYNC110  a real server
                    await trio.sleep(0.02)
        yield process, log
    finally:
        process.kill()
        await process.wait()


async def _answers(client: httpx.AsyncClient, port: int) -> bool:
    try:
        return (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    except httpx.TransportError:
        return False


async def test_unload_only_forgets_a_real_server_which_keeps_running(
    tmp_path: Path, free_port: int
) -> None:
    async with (
        own_server(tmp_path, free_port) as (process, log),
        open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime,
    ):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        with trio.fail_after(30):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        await runtime.unload(handle)
        assert (await runtime.status(handle)).state is InstanceState.UNKNOWN
        for command in (runtime.start, runtime.stop, runtime.health, runtime.unload):
            with pytest.raises(UnknownInstance):
                await command(handle)
        await trio.sleep(0.2)  # a probe already on the wire may still be logged
        lines_at_unload = log.read_text().splitlines()
        await trio.sleep(1.5)  # longer than the monitor's 1 s period
        assert log.read_text().splitlines() == lines_at_unload, "requests after unload"
        assert process.returncode is None, "inferactors must never stop an adopted server"
        async with httpx.AsyncClient(trust_env=False) as client:
            assert await _answers(client, free_port)
    assert lines_at_unload, "the server saw no request at all"
    assert all(line.startswith("GET ") for line in lines_at_unload), lines_at_unload


# Status mapping (items 23 to 26).


async def test_status_is_running_on_200_and_degraded_loading_on_503(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        running = await runtime.status(handle)
        assert (running.state, running.detail) == (InstanceState.RUNNING, "server up")
        server.health = 503
        loading = await runtime.status(handle)
        assert (loading.state, loading.detail) == (InstanceState.DEGRADED, "loading model")
        assert loading.pid is None


async def test_an_unlisted_model_is_degraded_and_a_gone_server_is_exited_until_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(models=("other-model.gguf",))
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        unlisted = await runtime.status(handle)
        assert unlisted.state is InstanceState.DEGRADED
        assert unlisted.detail == "model tiny is not listed by the server"
        server.down = True
        gone = await runtime.status(handle)
        assert gone.state is InstanceState.EXITED
        assert gone.detail is not None
        assert "not restart" in gone.detail
        assert "unreachable" in gone.detail
        server.down, server.models = False, ("Tiny-Q4_K_M.gguf",)
        assert (await runtime.status(handle)).state is InstanceState.RUNNING


async def test_a_monitored_server_that_goes_away_is_reported_exited_by_an_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        await runtime.start(handle)
        with trio.fail_after(5):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        server.down = True
        with trio.fail_after(5):  # the monitor probes every second once the server is up
            exited = await runtime.wait_state(handle, InstanceState.EXITED)
        assert exited.detail is not None
        assert "not restart" in exited.detail


@pytest.mark.parametrize(
    ("models_status", "state", "detail"),
    [
        (200, InstanceState.RUNNING, "server up"),
        (503, InstanceState.DEGRADED, "loading model"),
        (500, InstanceState.DEGRADED, "/v1/models returned HTTP 500"),
    ],
)
async def test_a_404_health_falls_back_to_the_model_list(
    autojump_clock: trio.testing.MockClock,
    models_status: int,
    state: InstanceState,
    detail: str,
) -> None:
    server = FakeLlama(health=404, models_status=models_status)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        server.requests.clear()
        status = await runtime.status(handle)
        assert (status.state, status.detail) == (state, detail)
        assert server.paths == ["/health", "/v1/models"]


async def test_a_302_is_not_followed_and_is_degraded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(health=302)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        status = await runtime.status(handle)
        assert status.state is InstanceState.DEGRADED
        assert status.detail == "/health returned HTTP 302"
    assert set(server.paths) == {"/health"}


async def test_the_status_of_an_unknown_handle_is_unknown_and_does_not_raise(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        ghost = InstanceHandle("infer.llamacpp.adopted", "ghost-00000000-node1", "ghost")
        status = await runtime.status(ghost)
        assert status.state is InstanceState.UNKNOWN
        with pytest.raises(UnknownInstance):
            await runtime.start(ghost)
        with pytest.raises(UnknownInstance):
            await runtime.spec_of(ghost)


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


# Deep health (item 62).


async def test_deep_health_posts_one_token_and_a_non_200_is_a_backend_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        result = await runtime.deep_health(handle)
        assert (result.text, result.finish_reason) == (" and", "length")
        posts = [r for r in server.requests if r.method == "POST"]
        assert [r.url.path for r in posts] == ["/v1/chat/completions"]
        body = json.loads(posts[0].content)
        assert body["max_tokens"] == 1
        assert body["stream"] is False
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        server.completion = 500
        with pytest.raises(BackendError, match="HTTP 500") as failed:
            await runtime.deep_health(handle)
        assert not isinstance(failed.value, DeepHealthTimeout)


async def test_deep_health_of_a_loading_server_sends_no_completion(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(health=503)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises(BackendError, match="not up"):
            await runtime.deep_health(handle)
    assert server.methods == {"GET"}


async def test_a_hanging_completion_is_a_deep_health_timeout_after_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(hang="/v1/chat/completions")
    async with adopted(server, deep_timeout_s=42.0) as runtime:
        handle = await runtime.load(chat())
        started = trio.current_time()
        with pytest.raises(DeepHealthTimeout, match="42 s"):
            await runtime.deep_health(handle)
        assert trio.current_time() - started == pytest.approx(42.0, abs=0.5)


# Served model, re-adoption, console (items 71, 72).


async def test_served_model_is_the_spec_model_when_adopted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        named = await runtime.load(chat())
        unnamed = await runtime.load(chat(role="bare", model=None))
        assert await runtime.served_model(named) == "tiny"
        assert await runtime.served_model(unnamed) is None
        assert await runtime.spec_of(named) == chat()
        assert await runtime.endpoint(named) == f"http://127.0.0.1:{PORT}"


async def test_adopt_re_registers_a_handle_and_console_is_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        again = await runtime.adopt(handle, chat())  # already registered: nothing changes
        assert again.instance_id == handle.instance_id
        await runtime.unload(handle)
        assert (await runtime.status(handle)).state is InstanceState.UNKNOWN
        back = await runtime.adopt(handle, chat())
        assert back == handle
        assert (await runtime.status(handle)).state is InstanceState.RUNNING
        with pytest.raises(Unsupported, match=f"has no console run \\({handle.instance_id}\\)"):
            await runtime.console(handle)
        server.down = True
        await runtime.unload(handle)
        with pytest.raises(AdmissionRefused, match=r"no infer\.llamacpp server answering"):
            await runtime.adopt(handle, chat())


# Commands that must always be answered.


@pytest.mark.parametrize(
    ("command", "path"),
    [("status", "/health"), ("health", "/health"), ("deep_health", "/v1/chat/completions")],
)
async def test_a_command_in_flight_when_its_instance_is_unloaded_is_answered(
    autojump_clock: trio.testing.MockClock, command: str, path: str
) -> None:
    server = FakeLlama()
    outcome: list[object] = []

    async def ask(runtime: InferRuntime, handle: InstanceHandle) -> None:
        with trio.fail_after(60):
            try:
                outcome.append(await getattr(runtime, command)(handle))
            except BackendError as error:  # "stopped before it answered" would do
                outcome.append(error)

    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        server.hang = path
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, runtime, handle)
            await server.entered.wait()
            await runtime.unload(handle)
    assert len(outcome) == 1


@pytest.mark.parametrize(
    ("command", "path"),
    [("status", "/health"), ("health", "/health"), ("deep_health", "/v1/chat/completions")],
)
async def test_a_caller_that_gives_up_does_not_break_the_runtime(
    autojump_clock: trio.testing.MockClock, command: str, path: str
) -> None:
    server = FakeLlama(slow=path, slow_s=1.5)
    async with adopted(server, probe_timeout_s=3.0) as runtime:
        handle = await runtime.load(chat())
        with trio.move_on_after(0.5) as gave_up:
            await getattr(runtime, command)(handle)
        assert gave_up.cancelled_caught
        await trio.sleep(5.0)  # the answer comes back to nobody meanwhile
        server.slow = None
        assert (await runtime.status(handle)).state is InstanceState.RUNNING


async def test_status_after_the_runtime_closed_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        handle = await runtime.load(chat())
    with trio.fail_after(60):
        status = await runtime.status(handle)
    assert status.state is InstanceState.UNKNOWN


async def test_an_event_stream_ends_when_the_runtime_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat())
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        await runtime.unload(handle)
    with trio.fail_after(60):
        seen = [event async for event in events]
    assert seen, "the events sent before the end are still delivered"


async def test_a_bad_subscribe_argument_fails_only_that_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises((InvalidConfig, ValueError)):
            await runtime.subscribe(-1)
        assert (await runtime.status(handle)).state is InstanceState.RUNNING
