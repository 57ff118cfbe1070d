"""`FleetScheduler`, the front door's scheduler under ``inferactors run``: every instance of
the run file, where it stands, granted while it serves, with its server's API key."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from inferactors._actors.front_door_seam import Residency
from inferactors._config.config import ControlMode, InferConfig
from inferactors._config.runfile import RunInstance
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._errors import FrontDoorRefused, RefusalKind
from inferactors._flavor import InferFlavor
from inferactors._policy.reload_plan import Placement
from inferactors._service.front_door_fleet import FleetScheduler
from inferactors._status import InstanceState, InstanceStatus


def _member(spec: InferenceSpec, status: InstanceStatus) -> SimpleNamespace:
    placement = Placement(
        RunInstance(ControlMode.ADOPTED, spec), InferConfig.adopted(spec.runtime), "local"
    )
    return SimpleNamespace(name=spec.role, placement=placement, status=status, handle=None)


RUNNING = InstanceStatus(InstanceState.RUNNING)
LLAMA = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=8090)
)
OLLAMA = InferenceSpec(role="notes", runtime=InferFlavor.OLLAMA, model="qwen2.5:0.5b")


def _fleet(*members: SimpleNamespace) -> FleetScheduler:
    return FleetScheduler(SimpleNamespace(members={m.name: m for m in members}))


async def test_models_grants_and_names() -> None:
    starting = InstanceStatus(InstanceState.LOADED, pid=42)
    scheduler = _fleet(_member(LLAMA, RUNNING), _member(OLLAMA, starting))
    entries = scheduler.models()
    assert [(e.name, e.aliases, e.residency) for e in entries] == [
        ("chat", ("tiny",), Residency.RESIDENT),
        ("notes", ("qwen2.5:0.5b",), Residency.STARTING),
    ]
    for name in ("chat", "tiny", "tiny:latest", "Chat"):
        grant = await scheduler.acquire(name)
        assert grant.upstream.base_url == "http://127.0.0.1:8090"
        assert grant.upstream.served_model == ""  # llama-server gets no model name
        assert grant.upstream.api_key is None
        grant.done()
    with pytest.raises(FrontDoorRefused) as not_ready:
        await scheduler.acquire("notes")
    assert (not_ready.value.status, not_ready.value.retry_after_s) == (503, 1.0)
    assert "its instance is loaded" in str(not_ready.value)
    with pytest.raises(FrontDoorRefused) as unknown:
        await scheduler.acquire("nope")
    assert unknown.value.kind is RefusalKind.UNKNOWN_MODEL
    assert '"chat", "notes"' in str(unknown.value)


async def test_an_ollama_instance_gets_its_tag() -> None:
    scheduler = _fleet(_member(OLLAMA, RUNNING))
    grant = await scheduler.acquire("qwen2.5:0.5b")
    assert grant.upstream.served_model == "qwen2.5:0.5b"
    assert grant.upstream.base_url == "http://127.0.0.1:11434"


async def test_the_servers_api_key_is_sent_and_a_bad_file_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("server-key-123\n")
    os.chmod(key_file, 0o600)
    keyed = InferenceSpec(
        role="chat",
        runtime=InferFlavor.LLAMACPP,
        serve=ServeArgs(port=8090, api_key_file=str(key_file)),
    )
    grant = await _fleet(_member(keyed, RUNNING)).acquire("chat")
    assert grant.upstream.api_key == "server-key-123"
    os.chmod(key_file, 0o644)
    with pytest.raises(FrontDoorRefused) as refused:
        await _fleet(_member(keyed, RUNNING)).acquire("chat")
    assert refused.value.status == 502
    assert str(key_file) in str(refused.value)
