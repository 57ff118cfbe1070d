"""Admitting and planning an Ollama model, and the tag it is known by (checklist 63, 64, 71).

Admission refuses a silent daemon, an unpulled tag and a model that is not an Ollama model,
with GET requests only (or none at all); the registry name maps to the manifest's Ollama
tag, or to the name itself when there is none, and `served_model` reports that tag.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from actors.ollama_support import (
    NAME,
    TAG,
    assert_allowed,
    load_body,
    loads,
    ollama_config,
    rig,
    spec_at,
)
from inferactors import (
    AdmissionRefused,
    InferenceSpec,
    InferFlavor,
    ModelFormat,
    ModelRegistry,
    ModelSource,
    ResolvedModel,
    open_runtime,
)
from inferactors._actors.ollama.state import ollama_tag_of
from inferactors._config.config import ControlMode
from inferactors._policy.admission import Plan
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama


async def test_checklist_63_admit_refuses_a_silent_daemon_and_an_unpulled_tag_with_gets_only(
    tmp_path: Path, registry_file: Path, free_port: int
) -> None:
    config = ollama_config(registry_file, tmp_path / "state")
    async with open_runtime(config) as runtime:
        with pytest.raises(AdmissionRefused) as silent:
            await runtime.admit(spec_at(free_port))
        assert str(silent.value) == (
            f"ollama is not answering at http://127.0.0.1:{free_port}; "
            "inferactors drives it but does not start it"
        )
        async with open_fake_ollama(models=("tiny:q4", "tinyllama")) as fake:
            with pytest.raises(AdmissionRefused) as unpulled:
                await runtime.load(spec_at(fake.port))
            assert str(unpulled.value) == (
                "ollama has no model tiny:latest: pull it first (inferactors never downloads)"
            )  # tiny:q4 and tinyllama:latest are other models
            assert await runtime.instances() == ()
        assert {r.method for r in fake.requests} == {"GET"}
        assert_allowed(fake)
        async with open_fake_ollama(models=("tiny",)) as pulled:
            admission = await runtime.admit(spec_at(pulled.port))
        assert admission.runtime == "infer.ollama"
        assert admission.notes[0] == f"endpoint http://127.0.0.1:{pulled.port}"
        assert "model tiny-model is ollama tag tiny:latest, pulled" in admission.notes
        assert {r.method for r in pulled.requests} == {"GET"}


async def test_checklist_63_a_model_that_is_not_an_ollama_model_is_refused(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    registry = tmp_path / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="gguf-model")
    async with (
        open_fake_ollama(models=("tiny",)) as fake,
        open_runtime(ollama_config(registry, tmp_path / "state")) as runtime,
    ):
        with pytest.raises(AdmissionRefused, match="cannot load a gguf model"):
            await runtime.admit(spec_at(fake.port, "gguf-model"))
        with pytest.raises(AdmissionRefused, match="model nope"):
            await runtime.admit(spec_at(fake.port, "nope"))
    assert fake.requests == []  # refused before any request


async def test_checklist_64_the_tag_is_the_manifests_ollama_tag(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        assert r.actor.tag == TAG
        assert r.actor.plan.model is not None
        assert r.actor.plan.model.name == NAME
        await r.start_running()
        assert TAG in fake.resident()
    assert [r.json for r in loads(fake)] == [load_body("30m")]


def test_checklist_64_without_a_tag_the_model_name_is_used() -> None:
    spec = InferenceSpec(role="chat", runtime=InferFlavor.OLLAMA, model="llama3.2")
    model = ResolvedModel(name="llama3.2", format=ModelFormat.OLLAMA, root=Path(), shards=())
    plan = Plan(spec=spec, mode=ControlMode.MANAGED, notes=(), model=model)
    assert ollama_tag_of(plan) == "llama3.2"
    tagged = attrs.evolve(model, source=ModelSource(ollama_tag="llama3.2:3b"))
    assert ollama_tag_of(attrs.evolve(plan, model=tagged)) == "llama3.2:3b"
    assert ollama_tag_of(attrs.evolve(plan, model=None)) == "llama3.2"


async def test_checklist_71_served_model_is_the_tag_through_the_runtime(
    tmp_path: Path, registry_file: Path
) -> None:
    async with (
        open_fake_ollama(models=("tiny",)) as fake,
        open_runtime(ollama_config(registry_file, tmp_path / "state")) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        assert (await runtime.spec_of(handle)).model == NAME
        assert await runtime.served_model(handle) == TAG
