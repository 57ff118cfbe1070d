"""A managed Ollama instance from plan to unload, as the daemon sees it.

One test drives the actor under MockClock and checks the exact request sequence the daemon
receives (planning GETs, the load held open, the ownership check, deep health by tag, the
one unload), only allowed paths and never a DELETE (checklist 70); the other runs the same
life through `open_runtime` against a fake Ollama on a real socket, as root too without
``run_as`` since inferactors runs no process for Ollama.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from actors.ollama_support import (
    PS,
    SURVEY,
    TAG,
    UNLOAD,
    assert_allowed,
    load_body,
    loads,
    ollama_config,
    requests,
    rig,
    slow,
    spec_at,
    unloads,
)
from inferactors import InstanceState, InstanceStatus, RunEvidence, StateChanged, open_runtime
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama


async def test_a_full_lifecycle_sends_exactly_these_requests(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Plan, load, start, loading, running, a periodic ownership check, deep health, stop,
    unload: the exact sequence the daemon receives, only allowed paths, never a DELETE."""
    slow(fake, load_delay_s=30.0)
    async with rig(fake, keep_alive=-1) as r:
        assert (await r.status()).state is InstanceState.LOADED
        await r.start()
        await trio.sleep(1.0)  # the load is in flight (it takes 30 s)
        assert await r.status() == InstanceStatus(InstanceState.DEGRADED, "loading model")
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await trio.sleep(1.5)  # one look of /api/ps (the watch runs at the probe period)
        assert await r.status() == InstanceStatus(InstanceState.RUNNING, "model resident")
        assert (await r.deep_health()).text == "Hello"
        evidence = await r.stop()
        assert evidence == RunEvidence.empty(
            runtime="infer.ollama", instance_id=r.actor.instance_id
        )
        assert fake.resident() == ("other:7b",)
        await r.unload()
        assert r.changes() == [
            (InstanceState.LOADED, "model not resident"),
            (InstanceState.DEGRADED, "loading model"),
            (InstanceState.RUNNING, "model resident"),
            (InstanceState.DEGRADED, "unloading model tiny:latest"),
            (InstanceState.LOADED, "stopped on request; model unloaded"),
        ]
    assert requests(fake) == [
        *SURVEY,  # planning: GETs only
        *SURVEY,  # status: Loaded
        ("GET", "/api/tags", None),  # start: a cloud model? (no: it is never loaded)
        PS,  # start: is the model already resident? (no)
        ("POST", "/api/generate", load_body(-1)),  # the load, open for the whole 30 s
        *SURVEY,  # status while the load is in flight
        PS,  # the load is confirmed in /api/ps (FC-18)
        PS,  # the periodic ownership check (FC-20)
        *SURVEY,  # status: Running
        PS,  # deep health: only while resident
        (
            "POST",
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1,
                "stream": False,
                "model": TAG,  # the tag, not the registry name
            },
        ),
        ("POST", "/api/generate", UNLOAD),  # the one unload
        PS,  # gone (FC-21)
    ]
    assert_allowed(fake)


async def test_managed_ollama_through_the_runtime(tmp_path: Path, registry_file: Path) -> None:
    """As root too, with no run_as: inferactors runs no process for Ollama."""
    data_root = tmp_path / "state"
    config = ollama_config(registry_file, data_root, keep_alive=-1)
    async with (
        open_fake_ollama(models=("tiny",), unload_linger_s=0.2) as fake,
        open_runtime(config) as rt,
    ):
        events = await rt.subscribe()
        handle = await rt.load(spec_at(fake.port))
        assert (rt.status(handle)).state is InstanceState.LOADED
        await rt.start(handle)
        with trio.fail_after(30):
            await rt.wait_state(handle, InstanceState.RUNNING)
        assert (await rt.deep_health(handle)).text == "Hello"
        evidence = await rt.stop(handle)
        assert (evidence.runtime, evidence.instance_id, evidence.pid) == (
            "infer.ollama",
            handle.instance_id,
            0,
        )
        assert fake.resident() == ()
        await rt.unload(handle)
        assert (rt.status(handle)).state is InstanceState.UNKNOWN
        assert not (data_root / handle.instance_id).exists()
        stopped = (InstanceState.LOADED, "stopped on request; model unloaded")
        changes: list[tuple[InstanceState, str | None]] = []
        with trio.fail_after(10):
            while changes[-1:] != [stopped]:
                event = await events.receive()
                if isinstance(event, StateChanged):
                    changes.append((event.new, event.detail))
    assert changes[:2] == [  # a status reads the view: it asks Ollama nothing
        (InstanceState.DEGRADED, "loading model"),
        (InstanceState.RUNNING, "model resident"),
    ]
    assert [r.json for r in loads(fake)] == [load_body(-1)]
    assert len(unloads(fake)) == 1
    assert_allowed(fake)
