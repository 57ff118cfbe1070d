"""Every admission problem of a managed instance comes at once, each naming its field: an
operator fixing a run file should not learn of an unknown model, then of a bad flag, then
of ``run_as``, then of a missing program, one run at a time."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest

from actors.managed_support import Lab, chat, listening, managed
from inferactors import AdmissionRefused, InvalidConfig, ServeArgs, open_runtime
from inferactors.testing import write_fake_server_program
from support import Unprivileged


async def test_unknown_model_missing_program_run_as_and_taken_port_come_together(
    tmp_path: Path, lab: Lab, free_port: int
) -> None:
    as_root = os.geteuid() == 0
    config = managed(lab.registry, lab.data_root, tmp_path / "missing", run_as=None)
    with listening(free_port):
        async with open_runtime(config) as runtime:
            with pytest.raises(AdmissionRefused) as refused:
                await runtime.admit(chat(free_port, model="nosuch"))
            assert await runtime.instances() == ()
    said = str(refused.value)
    expected = [
        "model nosuch: ",
        f"serve_programs: serve program {tmp_path / 'missing'} is not an executable file",
        f"serve.port: something already holds port {free_port}",
    ]
    if as_root:
        expected.insert(0, "run_as: managed servers run unprivileged")
    assert said.startswith(f"{len(expected)} problems: "), said
    positions = [said.find(part) for part in expected]
    assert -1 not in positions, said
    assert positions == sorted(positions), said


async def test_a_bad_flag_and_an_unknown_model_come_together(
    lab: Lab, free_port: int, server_dir: Path, unprivileged: Unprivileged
) -> None:
    program = write_fake_server_program(
        server_dir / "fake-llama-server",
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )
    spec = chat(free_port, model="nosuch")
    spec = attrs.evolve(spec, serve=ServeArgs(port=free_port, extra_args=("--mlock",)))
    async with open_runtime(lab.config(program)) as runtime:
        with pytest.raises(AdmissionRefused) as refused:
            await runtime.admit(spec)
    said = str(refused.value)
    assert said.startswith("2 problems: model nosuch: "), said
    assert "; serve.extra_args[0]: --mlock is not a flag of " in said, said


async def test_malformed_fields_alone_stay_invalid_config(
    lab: Lab, free_port: int, server_dir: Path, unprivileged: Unprivileged
) -> None:
    program = write_fake_server_program(
        server_dir / "fake-llama-server",
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )
    serve = ServeArgs(port=free_port, extra_args=("--mlock",))
    async with open_runtime(lab.config(program)) as runtime:
        with pytest.raises(InvalidConfig, match=r"^serve\.extra_args\[0\]: --mlock "):
            await runtime.admit(attrs.evolve(chat(free_port), serve=serve))
