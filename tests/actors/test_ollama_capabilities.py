"""Ollama's capabilities (issue 4 item 4): claimed only after a probe of an answering daemon.

Adopted and managed alike, `probe_capabilities` claims the runtime, the ollama format and
gguf once the daemon answers /api/version, with GET requests only; a dead port or an HTTP
500 claims nothing, while a 503 (a daemon up but busy) still claims the runtime.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import httpx

from actors.ollama_support import ollama_config
from inferactors import Capability, InferConfig, InferFlavor, open_runtime
from inferactors._edges.bundle import http_prober_factory
from inferactors.testing._fake_ollama import open_fake_ollama

OLLAMA_CAPABILITIES = (
    ("runtime.infer.ollama", ("ollama", "gguf"), "0.5.1"),
    ("format.ollama", (), None),
    ("format.gguf", (), None),
)


def summary(found: tuple[Capability, ...]) -> tuple[tuple[str, tuple[str, ...], str | None], ...]:
    return tuple((c.name, c.formats, c.version) for c in found)


async def test_ollama_capabilities_need_a_probe_and_an_answering_daemon(
    tmp_path: Path, registry_file: Path, free_port: int
) -> None:
    async with open_fake_ollama(models=("tiny",)) as fake:
        for config in (
            InferConfig.adopted(InferFlavor.OLLAMA, probe_port=fake.port),
            attrs.evolve(ollama_config(registry_file, tmp_path / "state"), probe_port=fake.port),
        ):
            async with open_runtime(config) as runtime:
                assert runtime.provides() == ()
                found = await runtime.probe_capabilities()
                assert summary(found) == OLLAMA_CAPABILITIES
                assert found[0].mode == config.mode.value
                assert runtime.provides() == found
    assert {r.method for r in fake.requests} == {"GET"}
    dead = InferConfig.adopted(InferFlavor.OLLAMA, probe_port=free_port)
    async with open_runtime(dead) as runtime:
        assert await runtime.probe_capabilities() == ()


async def test_ollama_capabilities_a_500_claims_nothing_a_503_claims_the_runtime() -> None:
    def answering(status: int) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            return httpx.Response(status, json={"version": "0.5.1"})

        return httpx.MockTransport(handle)

    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with open_runtime(config, open_prober=http_prober_factory(answering(500))) as rt:
        assert await rt.probe_capabilities() == ()
    async with open_runtime(config, open_prober=http_prober_factory(answering(503))) as rt:
        found = await rt.probe_capabilities()
    assert [c.name for c in found] == ["runtime.infer.ollama", "format.ollama", "format.gguf"]
