"""Adopted Ollama (issue 4 item 3): probed with GETs only and mapped as Ollama.

Through `open_runtime` against a fake Ollama on a real socket: a resident model is Running,
one pulled but idle or not pulled at all is reported as such, stop is unsupported and
unload leaves the daemon's models alone; a daemon that goes away is Exited and re-adopted
once it is back.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.ollama_support import TAG, spec_at
from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InstanceStatus,
    ServeArgs,
    Unsupported,
    open_runtime,
)
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama, serve_fake_ollama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig


async def test_adopted_ollama_is_only_probed_and_mapped_as_ollama() -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with (
        open_fake_ollama(models=("tiny", "spare"), preloaded=("tiny",)) as fake,
        open_runtime(config) as runtime,
    ):
        resident = await runtime.load(spec_at(fake.port, "tiny"))
        idle = await runtime.load(
            InferenceSpec(
                role="spare",
                runtime=InferFlavor.OLLAMA,
                model="spare",
                serve=ServeArgs(port=fake.port),
            )
        )
        missing = await runtime.load(
            InferenceSpec(
                role="missing",
                runtime=InferFlavor.OLLAMA,
                model="gone",
                serve=ServeArgs(port=fake.port),
            )
        )
        for handle in (resident, idle, missing):
            await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(resident, InstanceState.RUNNING)
        assert status.detail == "model resident"
        assert (runtime.status(idle)).detail == "server up; model not resident"
        assert runtime.status(missing) == InstanceStatus(
            InstanceState.DEGRADED, "model gone is not pulled", last_probe="up"
        )
        with pytest.raises(Unsupported, match="never stops it"):
            await runtime.stop(resident)
        await runtime.unload(resident)
        assert fake.resident() == (TAG,)  # untouched
        assert await runtime.served_model(idle) == "spare"
    assert {r.method for r in fake.requests} == {"GET"}  # checklist 20


async def test_adopted_ollama_gone_is_exited_and_re_adopted_once_back(
    free_port: int,
) -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("tiny",)))
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        serving = trio.CancelScope()

        async def serve(*, task_status: trio.TaskStatus[object]) -> None:
            with serving:
                await serve_fake_ollama(fake, free_port, task_status=task_status)

        await nursery.start(serve)
        handle = await runtime.load(spec_at(free_port, "tiny"))
        await runtime.start(handle)
        with trio.fail_after(30):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        serving.cancel()
        with trio.fail_after(30):
            gone = await runtime.wait_state(handle, InstanceState.EXITED)
        assert gone.detail is not None
        assert gone.detail.endswith("inferactors does not restart adopted servers")
        await nursery.start(serve_fake_ollama, fake, free_port)
        with trio.fail_after(30):
            back = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert back.detail == "model resident"
        assert runtime.network_exposure.value == "lan"
        nursery.cancel_scope.cancel()
    assert {r.method for r in fake.requests} == {"GET"}
