"""An mlx_lm.server from before its model list answers ``GET /v1/models`` with 501
``Unsupported method ('GET')`` (Python's ``http.server`` for a method it has no handler
for): it has no list, which is not an unreadable one. Such a server is Running, managed
(its readiness proved by one real token) and adopted; one whose list answers 500 is not.
The servers are the kit's fake, as real processes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from inferactors import (
    AdmissionRefused,
    BackendError,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    ServeArgs,
    open_runtime,
)
from inferactors._actors.runtime import InstanceHandle
from inferactors._status import InstanceState
from inferactors.testing import FakeServerFaults, RuntimeKit
from inferactors.testing._fake_faults import Flavor
from inferactors.testing._fake_launch import fake_server_argv
from inferactors.testing._fake_processes import free_port
from inferactors.testing._workspace import importable_paths


@contextmanager
def fake(flavor: Flavor, faults: FakeServerFaults, port: int) -> Iterator[None]:
    argv = fake_server_argv(
        port, flavor=flavor, model="tiny", faults=faults, sys_path=importable_paths()
    )
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.kill()
        process.wait()


async def until_state(runtime: InferRuntime, handle: InstanceHandle, state: InstanceState) -> None:
    with trio.fail_after(15):
        await runtime.wait_state(handle, state)


async def load_when_listening(runtime: InferRuntime, spec: InferenceSpec) -> InstanceHandle:
    """An adopted load is refused until the fake listens (about 0.1 s)."""
    with trio.fail_after(10):
        while True:
            try:
                return await runtime.load(spec)
            except (BackendError, AdmissionRefused):
                await trio.sleep(0.05)


@pytest.mark.parametrize("flavor", ["mlx", "llamacpp"])
async def test_an_adopted_server_whose_model_list_is_501_is_running(flavor: Flavor) -> None:
    port = free_port()
    runtime_flavor = InferFlavor.MLX_LM if flavor == "mlx" else InferFlavor.LLAMACPP
    spec = InferenceSpec(
        role="old", runtime=runtime_flavor, model="tiny", serve=ServeArgs(port=port)
    )
    with fake(flavor, FakeServerFaults(models_status=501), port):
        async with open_runtime(InferConfig.adopted(runtime_flavor)) as runtime:
            handle = await load_when_listening(runtime, spec)
            await runtime.start(handle)
            await until_state(runtime, handle, InstanceState.RUNNING)
            report = await runtime.health(handle)
            assert (report.models, report.models_problem) == ((), None)


async def test_a_managed_server_whose_model_list_is_501_is_running_after_its_token(
    inferactors_kit: RuntimeKit, tmp_path: Path
) -> None:
    program = inferactors_kit.fake_program()
    faulty = program.with_name(program.name + "-501")
    faulty.write_text(program.read_text().replace(' "$@"', ' --models-status 501 "$@"'))
    faulty.chmod(0o755)
    config = inferactors_kit.config(program=faulty)
    async with open_runtime(config) as runtime:
        handle = await runtime.load(inferactors_kit.spec("old", free_port()))
        await runtime.start(handle)
        await until_state(runtime, handle, InstanceState.RUNNING)
        status = runtime.status(handle)
        assert status.detail == "server up"


async def test_a_model_list_answering_500_is_still_degraded() -> None:
    port = free_port()
    spec = InferenceSpec(
        role="broken", runtime=InferFlavor.MLX_LM, model="tiny", serve=ServeArgs(port=port)
    )
    with fake("mlx", FakeServerFaults(models_status=500), port):
        async with open_runtime(InferConfig.adopted(InferFlavor.MLX_LM)) as runtime:
            handle = await load_when_listening(runtime, spec)
            await runtime.start(handle)
            await until_state(runtime, handle, InstanceState.DEGRADED)
            status = runtime.status(handle)
            assert status.detail == "model list unreadable: /v1/models returned HTTP 500"
