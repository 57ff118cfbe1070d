"""Adopted Ollama deep health never changes the daemon (issue 9 item 4).

Through `open_runtime` against a fake Ollama on a real socket: a resident model answers
its one token; a model that is pulled but not resident, or a cloud model, is refused with
the reason and nothing is POSTed: the daemon loads nothing and no cloud host is called.
"""

from __future__ import annotations

import pytest

from actors.ollama_support import TAG, spec_at
from inferactors import (
    BackendError,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    ServeArgs,
    open_runtime,
)
from inferactors.testing._fake_ollama import open_fake_ollama
from inferactors.testing._fake_ollama_api import CLOUD_HOST

CLOUD = "gpt-oss:120b-cloud"


def adopted(port: int, model: str, role: str) -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.OLLAMA, model=model, serve=ServeArgs(port=port)
    )


async def test_adopted_deep_health_loads_nothing_and_calls_no_cloud() -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with (
        open_fake_ollama(models=("tiny", "spare"), preloaded=("tiny",), cloud=(CLOUD,)) as fake,
        open_runtime(config) as runtime,
    ):
        resident = await runtime.load(spec_at(fake.port, "tiny"))
        idle = await runtime.load(adopted(fake.port, "spare", "spare"))
        cloud = await runtime.load(adopted(fake.port, CLOUD, "cloud"))
        assert (await runtime.deep_health(resident)).text
        posted = len([r for r in fake.requests if r.method == "POST"])
        with pytest.raises(BackendError) as refused:
            await runtime.deep_health(idle)
        assert str(refused.value) == (
            "deep health: spare is not resident on the adopted Ollama: a deep health would "
            "load it; not sent"
        )
        with pytest.raises(BackendError) as refused:
            await runtime.deep_health(cloud)
        assert str(refused.value) == (
            f"deep health: {CLOUD} is a cloud model: deep health would send a request to "
            f"{CLOUD_HOST}; not sent"
        )
        assert len([r for r in fake.requests if r.method == "POST"]) == posted == 1
        assert fake.resident() == (TAG,)
