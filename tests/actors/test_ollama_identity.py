"""Ollama's own names and cloud models (issue 9 item 6).

Names are read as Ollama reads them, so any of its spellings of a model is that model, a
look-alike never is, namespaced models (``user/model``, ``hf.co/org/repo:Q4_K_M``) are
adopted and managed like any other, and a cloud model (``remote_host`` in ``/api/tags``) is
never loaded nor unloaded: a managed start of one fails saying so, an adopted one is only
probed, never sent a keep_alive.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from actors.ollama_support import loads, rig, spec_at, unloads
from inferactors import (
    BackendError,
    InferConfig,
    InferFlavor,
    InstanceState,
    InstanceStatus,
    open_runtime,
)
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig

CLOUD = "gpt-oss:120b-cloud"


async def test_adopted_ollama_names_match_exactly_as_ollama_reads_them() -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with (
        open_fake_ollama(
            models=("qwen", "qwen2.5:0.5b", "user/model", "hf.co/org/repo:Q4_K_M"),
            preloaded=("qwen2.5:0.5b", "user/model"),
        ) as fake,
        open_runtime(config) as runtime,
    ):
        wanted = {
            "registry.ollama.ai/user/model:latest": "model resident",  # a namespaced model
            "library/qwen2.5:0.5b": "model resident",
            "qwen": "server up; model not resident",  # not qwen2.5:0.5b, which is loaded
            "hf.co/org/repo:Q4_K_M": "server up; model not resident",
        }
        for role, (model, detail) in enumerate(wanted.items()):
            handle = await runtime.load(attrs.evolve(spec_at(fake.port, model), role=f"r{role}"))
            await runtime.start(handle)
            with trio.fail_after(30):
                status = await runtime.wait_state(handle, InstanceState.RUNNING)
            assert (model, status.detail) == (model, detail)
        missing = await runtime.load(attrs.evolve(spec_at(fake.port, "model"), role="missing"))
        await runtime.start(missing)
        assert runtime.status(missing) == InstanceStatus(  # model is not user/model
            InstanceState.DEGRADED, "model model is not pulled", last_probe="up"
        )
    assert {r.method for r in fake.requests} == {"GET"}


@pytest.mark.parametrize("tag", ["registry.ollama.ai/library/tiny", "hf.co/org/repo:Q4_K_M"])
async def test_a_managed_model_under_any_ollama_name_loads_and_unloads_once(
    autojump_clock: trio.testing.MockClock, tag: str
) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny", "hf.co/org/repo:Q4_K_M")))
    async with rig(fake, tag=tag) as r:
        running = await r.start_running()
        assert running.detail == "model resident"
        assert len(fake.resident()) == 1
        await r.stop()
    assert [request.json["model"] for request in loads(fake)] == [tag]  # type: ignore[index]
    unloaded = [r for r in fake.requests if r.json == {"model": tag, "keep_alive": 0}]
    assert len(unloaded) == 1
    assert fake.resident() == ()


async def test_a_managed_cloud_model_is_never_loaded_nor_unloaded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny",), cloud=(CLOUD,)))
    async with rig(fake, tag=CLOUD) as r:
        await r.start()
        with trio.fail_after(60):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail == (
            "load failed: gpt-oss:120b-cloud is an ollama cloud model (it runs on "
            "https://ollama.com:443); inferactors never loads or unloads a cloud model: "
            "adopt it instead"
        )
        await r.stop()
        await r.unload()
    assert loads(fake) == []
    assert unloads(fake) == []
    assert all(r.path != "/api/generate" for r in fake.requests)


async def test_an_adopted_cloud_model_is_probed_and_never_sent_a_keep_alive() -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with (
        open_fake_ollama(models=("tiny",), cloud=(CLOUD,)) as fake,
        open_runtime(config) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port, CLOUD))
        await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert status.detail == "server up; model not resident"
        with pytest.raises(BackendError, match="is a cloud model: deep health would send"):
            await runtime.deep_health(handle)  # the cloud host is not ours to call (issue 9)
        await runtime.unload(handle)
    assert [r for r in fake.requests if r.method == "POST"] == []
