"""Watching a resident model: health, deep health, ownership and a daemon that goes away.

Deep health asks by tag and only while the model is resident (checklist 62); the daemon is
never restarted and a restart is refused, a daemon gone is Exited until it answers again
(70), and an unreachable daemon or an unpulled tag is reported. Someone else changing the
model's keep_alive, or unloading it, is reported and never undone (FC-20).
"""

from __future__ import annotations

from functools import partial

import httpx
import pytest
import trio
import trio.testing

from actors.ollama_support import TAG, assert_allowed, loads, rig, unloads
from inferactors import BackendError, InstanceState, InvalidState, RestartScheduled, Up
from inferactors._actors.messages import Restart
from inferactors._actors.ollama.actor import WATCH_INTERVAL_S
from inferactors._edges.bundle import ProbeTimed
from inferactors.testing._fake_ollama import FakeOllama


async def test_checklist_70_the_daemon_is_never_restarted_and_restart_is_refused(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Ollama has no process of ours: a daemon gone is reported (Exited), never restarted."""
    async with rig(fake) as r:
        await r.start_running()
        with pytest.raises(InvalidState, match="never restarted"):
            await r.route(partial(Restart, 1))
        r.line.down = True
        status = await r.status()
        assert status.state is InstanceState.EXITED
        assert status.detail is not None
        assert status.detail.startswith("unreachable (GET /api/version:")
        await trio.sleep(120.0)
        r.line.down = False
        assert (await r.status()).detail == "model resident"
        assert not any(isinstance(e, RestartScheduled) for e in r.seen)
        r.changes()
        assert not any(isinstance(e, RestartScheduled) for e in r.seen)
    assert_allowed(fake)


async def test_deep_health_asks_by_tag_and_never_for_a_model_that_is_not_resident(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        with pytest.raises(BackendError, match="is not resident"):
            await r.deep_health()
        assert [q for q in fake.requests if q.path == "/v1/chat/completions"] == []
        await r.start_running()
        result = await r.deep_health()
        assert (result.text, result.finish_reason) == ("Hello", "length")
        report = await r.health()
        assert isinstance(report.health, Up)
        assert report.lists(TAG)
        assert report.resident(TAG)
        assert report.version == "0.5.1"
    (asked,) = [q for q in fake.requests if q.path == "/v1/chat/completions"]
    assert isinstance(asked.json, dict)
    assert asked.json["model"] == TAG
    assert "keep_alive" not in asked.json


async def test_fc20_a_foreign_keep_alive_is_reported_as_ownership_lost_never_re_pinned(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake, keep_alive=-1) as r:
        await r.start_running()
        await trio.sleep(30.0)
        await r.deep_health()  # our own request moves expires_at: not a foreign change
        await trio.sleep(10.0)
        assert (await r.status()).detail == "model resident"
        async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as other:
            body = {"model": "tiny", "prompt": "hi", "stream": False, "keep_alive": "5m"}
            assert (await other.post("/api/generate", json=body)).status_code == 200
        with trio.fail_after(10):
            lost = await r.until(InstanceState.DEGRADED, "ownership lost")
        assert lost.detail is not None
        assert "another client changed the keep_alive of tiny:latest" in lost.detail
        assert "inferactors does not re-pin it" in lost.detail
        assert (await r.status()).detail == lost.detail
        await trio.sleep(60.0)
        assert len(loads(fake)) == 1  # never re-pinned
        await r.stop()
    assert len(unloads(fake)) == 1


async def test_fc20_a_model_unloaded_by_someone_else_is_reported_not_reloaded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start_running()
        async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as other:
            await other.post("/api/generate", json={"model": "tiny", "keep_alive": 0})
        unloaded_at = trio.current_time()
        gone = await r.until(InstanceState.DEGRADED)
        assert trio.current_time() - unloaded_at <= WATCH_INTERVAL_S  # within a probe period
        assert gone.detail is not None
        assert gone.detail.startswith(
            "model tiny:latest unloaded before its keep_alive ran out (expires_at "
        )
        assert gone.detail.endswith(
            "another client unloaded it or ollama made room for another model "
            "(it was loaded by us); inferactors does not reload it"
        )
        await trio.sleep(60.0)
        assert len(loads(fake)) == 1


async def test_a_model_whose_keep_alive_ran_out_is_seen_within_one_probe_period(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    timed: list[ProbeTimed] = []
    async with rig(fake, keep_alive="1m", on_probe=timed.append) as r:
        await r.start_running()
        expires_at = fake.book.runners["tiny:latest"].expires_at
        assert expires_at is not None
        gone = await r.until(InstanceState.DEGRADED)
        assert "tiny:latest" not in fake.resident()
        assert expires_at <= trio.current_time() <= expires_at + WATCH_INTERVAL_S
        assert gone.detail == (
            f"model tiny:latest unloaded by ollama: its keep_alive ran out at "
            f"{fake.wall(expires_at).isoformat()} (it was loaded by us); "
            "inferactors does not reload it"
        )
        assert (await r.status()).detail == gone.detail
        await trio.sleep(60.0)
        assert len(loads(fake)) == 1  # our policy does not reload it
        assert unloads(fake) == []
    looks = [t for t in timed if t.instance_id == r.actor.instance_id]
    assert len(looks) >= 100  # every watch look (1 per second over ~2 minutes) was timed
    assert all(t.latency_s >= 0 for t in looks)


async def test_an_unreachable_daemon_and_an_unpulled_tag_are_reported(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        r.line.down = True
        status = await r.status()
        assert status.state is InstanceState.EXITED
        assert status.detail is not None
        assert status.detail.startswith("unreachable (GET /api/version:")
        await r.start()  # the /api/ps check fails: nothing is loaded blind
        await trio.sleep(1.0)
        r.line.down = False
        status = await r.status()
        assert status.state is InstanceState.DEGRADED
        assert status.detail is not None
        assert status.detail.startswith("load failed: cannot tell whether tiny:latest is resident")
        await r.stop()
        del fake.book.pulled[TAG]
        assert (await r.status()).detail == "model tiny:latest is not pulled"
    assert loads(fake) == []
    assert unloads(fake) == []
