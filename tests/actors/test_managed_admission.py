"""Admitting and loading managed llama.cpp instances: models, programs, ports and ids.

Checklist items 17 and 36 to 38: admission refuses a missing, unknown, tampered or foreign
model and a missing or non-executable serve program, and an occupied port, found with a
bare TCP connect that sends nothing (a listener whose accept queue is full counts too),
while a port outside the allowed range is refused without connecting. Items 29, 30 and
41: duplicate instances and address clashes are refused, and a refused load leaves no
instance directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from actors.managed_support import Lab, black_hole, chat, listening, managed, names_in
from inferactors import (
    AdmissionRefused,
    InvalidConfig,
    InvalidState,
    ModelFormat,
    ModelRegistry,
    open_runtime,
)
from inferactors._edges.bundle import Edges, SystemContainment
from inferactors._edges.containment import user_name

# Admission (items 17, 36, 37, 38).


def tamper(path: Path) -> None:
    """Flip every bit of the last byte of ``path``: same size, different digest."""
    with path.open("r+b") as file:
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 0xFF]))


async def test_managed_admit_refuses_missing_unknown_tampered_and_foreign_models(
    tmp_path: Path, tiny_gguf: Path, lab: Lab, free_port: int
) -> None:
    registry = tmp_path / "models.json"
    models = ModelRegistry.open(registry)
    copy = shutil.copy(tiny_gguf, tmp_path / "copy.gguf")
    models.add(Path(copy), name="copy")
    (tmp_path / "mlx").mkdir()
    (tmp_path / "mlx" / "config.json").write_text("{}")
    (tmp_path / "mlx" / "model.safetensors").write_bytes(b"\0" * 64)
    models.add(tmp_path / "mlx", name="mlxm", format=ModelFormat.MLX)
    tamper(Path(copy))
    refusals = {
        None: "managed mode needs a model",
        "nosuch": "model nosuch: ",
        "copy": "model copy: ",
        "mlxm": "infer.llamacpp cannot load a mlx model \\(mlxm\\)",
    }
    async with open_runtime(lab.config(registry=registry)) as runtime:
        for model, why in refusals.items():
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.admit(chat(free_port, model=model))
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.load(chat(free_port, model=model))
        assert await runtime.instances() == ()
    assert names_in(lab.data_root) == []


async def test_managed_admit_refuses_a_missing_or_non_executable_serve_program(
    tmp_path: Path, lab: Lab, free_port: int
) -> None:
    plain = tmp_path / "plain-file"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o644)
    cases = {
        None: "managed mode needs a serve program",
        tmp_path / "missing": "is not an executable file",
        plain: "is not an executable file",
        tmp_path: "is not an executable file",
    }
    for program, why in cases.items():
        async with open_runtime(
            managed(lab.registry, lab.data_root, program, run_as=lab.run_as)
        ) as runtime:
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.admit(chat(free_port))
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.load(chat(free_port))


async def accept_and_record(listener: socket.socket, received: list[bytes]) -> None:
    """Accept connections on ``listener`` and record everything each one sent."""
    sock = trio.socket.from_stdlib_socket(listener)
    while True:
        connection, _ = await sock.accept()
        with connection:
            data = b""
            while chunk := await connection.recv(4096):
                data += chunk
            received.append(data)


async def test_an_occupied_port_is_refused_at_admit_by_a_bind_that_sends_nothing(
    lab: Lab, free_port: int
) -> None:
    received: list[bytes] = []
    config = lab.config()
    with listening(free_port) as listener:
        async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
            nursery.start_soon(accept_and_record, listener, received)
            with pytest.raises(AdmissionRefused) as refused:
                await runtime.admit(chat(free_port))
            await trio.sleep(0.2)
            nursery.cancel_scope.cancel()
    assert str(refused.value) == (
        f"serve.port: something already holds port {free_port} on 127.0.0.1; "
        "adopt it instead of managing over it"
    )
    assert received == [], "the port check binds: no connection, not even an empty one"


async def test_a_port_outside_the_allowed_range_is_refused_without_connecting(
    lab: Lab, free_port: int
) -> None:
    received: list[bytes] = []
    low = free_port + 1 if free_port < 65535 else 1
    config = lab.config(allowed_ports=(low, low))
    with listening(free_port) as listener:
        async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
            nursery.start_soon(accept_and_record, listener, received)
            with pytest.raises(AdmissionRefused, match="allowed range"):
                await runtime.admit(chat(free_port))
            with pytest.raises(AdmissionRefused, match="allowed range"):
                await runtime.load(chat(free_port))
            await trio.sleep(0.3)
            nursery.cancel_scope.cancel()
    assert received == []
    assert names_in(lab.data_root) == []


async def test_a_listener_with_a_full_accept_queue_is_an_occupied_port(
    lab: Lab, free_port: int
) -> None:
    with black_hole(free_port):
        async with open_runtime(lab.config()) as runtime:
            with pytest.raises(AdmissionRefused, match="already holds port"):
                await runtime.admit(chat(free_port))


# Ids and addresses (items 29, 30, 41).


async def test_ids_duplicates_and_address_clashes_of_managed_instances(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config()) as runtime:
        first = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match=f"{first.instance_id} is already loaded"):
            await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match="is already used by another instance"):
            await runtime.load(chat(free_port, role="other"))
        with pytest.raises(InvalidState, match="is already used by another instance"):
            await runtime.load(chat(free_port, role="other", host="localhost"))
        with pytest.raises(InvalidState, match="is already used by another instance"):
            await runtime.load(chat(free_port, role="other", host="::1"))  # the run file's rule
        elsewhere = await runtime.load(chat(free_port, role="other", host="127.0.0.2"))
        assert [h.instance_id for h in await runtime.instances()] == [
            first.instance_id,
            elsewhere.instance_id,
        ]


async def test_a_refused_load_leaves_no_instance_directory(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config()) as runtime:
        first = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState):
            await runtime.load(chat(free_port, role="other"))
    assert names_in(lab.data_root) == [first.instance_id, "logs"]  # logs: every output file


@attrs.frozen
class AsUser(SystemContainment):
    """The real containment, as a supervisor of effective uid ``uid`` sees it."""

    uid: int

    def euid(self) -> int:
        return self.uid


async def test_a_supervisor_that_is_not_root_may_not_name_another_user_in_run_as(
    lab: Lab, free_port: int
) -> None:
    """An embedding program's config (``inferactors run`` refuses it as it reads the run
    file): refused at admission naming ``run_as``, not at the start's chown of its directory."""
    nobody = pwd.getpwnam("nobody").pw_uid
    uid = os.geteuid() if os.geteuid() not in (0, nobody) else 1
    config = managed(lab.registry, lab.data_root, lab.program, run_as="nobody")
    async with open_runtime(config, edges=Edges(containment=AsUser(uid))) as runtime:
        with pytest.raises(InvalidConfig) as refused:
            await runtime.admit(chat(free_port))
        with pytest.raises(InvalidConfig):
            await runtime.load(chat(free_port))
        assert await runtime.instances() == ()
    me = user_name(uid)
    assert str(refused.value) == (
        f"run_as 'nobody': running servers as another user needs root; this supervisor runs "
        f"as {me} (uid {uid}): leave run_as out to run them as {me}"
    )
    assert names_in(lab.data_root) == []
