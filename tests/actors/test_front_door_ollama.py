"""An Ollama model on demand behind the front door (a fake Ollama on a real socket): the
first request loads it through the API with our keep_alive; an idle TTL unloads it with
the one ``keep_alive: 0`` we owe; a model someone else loaded is used, never unloaded."""

from __future__ import annotations

from pathlib import Path

import trio

from actors.ollama_support import assert_allowed, load_body, loads, ollama_config, spec_at, unloads
from inferactors import (
    InstanceResidency,
    ResidencySection,
    ResidencyStop,
    StopReason,
    door_members,
    door_settings,
    open_runtime,
    open_scheduler,
)
from inferactors._actors.front_door_seam import Residency
from inferactors._events import Event
from inferactors.testing import FakeFleet
from inferactors.testing._fake_ollama import open_fake_ollama

TTL_S = 1.0


async def test_an_ollama_model_loads_on_demand_and_idles_out(
    tmp_path: Path, registry_file: Path
) -> None:
    config = ollama_config(registry_file, tmp_path / "state", keep_alive=-1)
    events: list[Event] = []
    async with (
        open_fake_ollama(models=("tiny",), unload_linger_s=0.1) as fake,
        open_runtime(config) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        setting = InstanceResidency(on_demand=True, idle_ttl_s=TTL_S)
        members = await door_members([(runtime, handle, setting)])
        gauge = FakeFleet().memory()  # nothing of ours runs: the daemon is another program
        settings = await door_settings(ResidencySection(max_wait_s=30.0), gauge, 5.0)
        async with open_scheduler(members, settings, gauge=gauge, on_event=events.append) as door:
            assert not loads(fake)
            with trio.fail_after(30.0):
                grant = await door.acquire("chat")
            assert grant.upstream.served_model == "tiny:latest"
            assert grant.upstream.base_url == f"http://127.0.0.1:{fake.port}"
            assert [r.json for r in loads(fake)] == [load_body(-1)]
            grant.done()
            with trio.fail_after(10.0):
                while door.residency()["chat"].residency is not Residency.NOT_LOADED:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert len(unloads(fake)) == 1  # the one unload we owe
            assert fake.resident() == ()
            [stop] = [e for e in events if isinstance(e, ResidencyStop)]
            assert stop.reason is StopReason.TTL
    assert_allowed(fake)


async def test_a_model_someone_else_loaded_is_used_and_never_unloaded(
    tmp_path: Path, registry_file: Path
) -> None:
    config = ollama_config(registry_file, tmp_path / "state")
    async with (
        open_fake_ollama(models=("tiny",), preloaded=("tiny",)) as fake,
        open_runtime(config) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        setting = InstanceResidency(on_demand=True, idle_ttl_s=TTL_S)
        members = await door_members([(runtime, handle, setting)])
        gauge = FakeFleet().memory()
        settings = await door_settings(None, gauge, 5.0)
        async with open_scheduler(members, settings, gauge=gauge) as door:
            with trio.fail_after(30.0):
                (await door.acquire("chat")).done()
            with trio.fail_after(10.0):
                while door.residency()["chat"].residency is not Residency.NOT_LOADED:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        assert not loads(fake)
        assert not unloads(fake)
        assert fake.resident() == ("tiny:latest",)
