"""Unloading: exactly one unload for a load we asked for, none for anyone else's model.

A model resident before we started is never loaded nor unloaded (checklist 67); a load of
ours is unloaded exactly once, at stop or at unload (68), also when the load was aborted or
the actor is torn down, and a stop before the load was sent owes nothing. A model that
lingers in /api/ps after our unload is polled until gone, reported if it outlives the stop's
grace but never unloaded again, and a start meanwhile waits for it (FC-21).
"""

from __future__ import annotations

import httpx
import pytest
import trio
import trio.testing

from actors.ollama_support import (
    PS,
    TAG,
    UNLOAD,
    assert_allowed,
    load_body,
    loads,
    requests,
    rig,
    slow,
    unloads,
)
from inferactors import InstanceState, InstanceStatus, InvalidState, RunEvidence, UnknownInstance
from inferactors.testing._fake_ollama import FakeOllama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig


async def test_checklist_67_a_pre_resident_model_is_never_loaded_nor_unloaded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=(), preloaded=("tiny",)))
    async with rig(fake) as r:
        running = await r.start_running()
        assert running.detail == (
            "model resident (loaded by someone else; inferactors never unloads it)"
        )
        assert (await r.deep_health()).text == "Hello"
        assert await r.stop() == RunEvidence.empty(
            runtime="infer.ollama", instance_id=r.actor.instance_id
        )
        status = await r.status()
        assert (status.state, status.detail) == (
            InstanceState.LOADED,
            "stopped; the model stays resident (loaded by someone else)",
        )
        await r.start()
        await r.unload()
    assert [r for r in fake.requests if r.path == "/api/generate"] == []
    assert fake.resident() == (TAG,)
    assert_allowed(fake)


async def test_checklist_68_exactly_one_unload_at_stop(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start_running()
        await r.stop()
        with pytest.raises(InvalidState, match="is not running"):
            await r.stop()
        await r.unload()
    assert len(unloads(fake)) == 1
    assert TAG not in fake.resident()


async def test_checklist_68_exactly_one_unload_at_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start_running()
        await r.unload()
        with pytest.raises(UnknownInstance):
            await r.status()
    assert len(unloads(fake)) == 1
    assert fake.resident() == ("other:7b",)


async def test_a_load_aborted_by_a_stop_owes_no_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Issue 9 item 7 (over checklist 68): our hang-up aborts the load, so the model was
    never brought in by us, and we never unload what we did not bring in."""
    slow(fake, load_delay_s=600.0)
    async with rig(fake) as r:
        await r.start()
        await trio.sleep(10.0)
        assert len(loads(fake)) == 1  # in flight
        await r.stop()
        assert await r.status() == InstanceStatus(InstanceState.LOADED, "stopped on request")
        await r.unload()
    assert unloads(fake) == []
    assert TAG not in fake.resident()  # the daemon aborted the load when we hung up


async def test_a_load_answered_just_before_a_stop_is_ours_and_unloaded_once(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """The load answered 200; the stop lands while its /api/ps confirmation is in flight
    (so `Loaded` is never posted): the model is ours all the same, and unloaded once."""
    slow(fake, load_delay_s=30.0)
    async with rig(fake) as r:
        await r.start()
        await trio.sleep(10.0)  # checked; the load is in flight
        r.line.ps_delay_s = 1.5  # the confirmation will take 1.5 s (under the 2 s timeout)
        await trio.sleep(20.5)  # the load answered at 30 s; its confirmation is in flight
        assert TAG in fake.resident()
        assert (InstanceState.RUNNING, "model resident") not in r.changes()  # not posted yet
        await r.stop()
        await r.unload()
    assert len(unloads(fake)) == 1
    sent = requests(fake)
    assert sent.index(("POST", "/api/generate", UNLOAD)) > sent.index(
        ("POST", "/api/generate", load_body("30m"))
    )


async def test_a_stop_before_the_load_was_sent_owes_no_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        r.line.ps_delay_s = 1.0
        await r.start()
        await r.stop()  # the /api/ps check has not answered yet: no load was asked for
        await trio.sleep(5.0)
        await r.unload()
    assert loads(fake) == []
    assert unloads(fake) == []


async def test_fc21_stop_polls_ps_until_a_lingering_model_is_gone(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, unload_linger_s=3.0)
    async with rig(fake) as r:
        await r.start_running()
        fake.requests.clear()
        began = trio.current_time()
        await r.stop(grace_s=10.0)
        assert 2.9 <= trio.current_time() - began <= 3.2
        assert TAG not in fake.resident()
        assert (await r.status()).detail == "stopped on request; model unloaded"
    sent = requests(fake)
    assert sent[0] == ("POST", "/api/generate", UNLOAD)
    assert set(sent[1:-3]) == {PS}  # then only /api/ps until it is gone
    assert len(unloads(fake)) == 1


async def test_fc21_a_model_lingering_past_the_deadline_is_reported_not_unloaded_again(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, unload_linger_s=30.0)
    async with rig(fake) as r:
        await r.start_running()
        began = trio.current_time()
        await r.stop(grace_s=2.0)
        assert trio.current_time() - began == pytest.approx(2.0, abs=0.2)
        lingering = await r.status()
        assert lingering == InstanceStatus(
            InstanceState.DEGRADED,
            "model tiny:latest still resident 2 s after our unload; "
            "inferactors does not send it again",
        )
        await trio.sleep(40.0)
        assert await r.status() == InstanceStatus(
            InstanceState.LOADED, "stopped on request; model unloaded"
        )
    assert len(unloads(fake)) == 1


async def test_fc21_a_start_during_our_lingering_unload_waits_for_it_then_loads_afresh(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """A model still in /api/ps because of our own unload is not "someone else's"."""
    slow(fake, unload_linger_s=5.0)
    async with rig(fake) as r:
        await r.start_running()
        await r.stop(grace_s=1.0)
        assert (await r.status()).detail is not None
        again = await r.start_running()
        assert again.detail == "model resident"  # ours, so it is unloaded at stop
        await r.stop()
    assert len(loads(fake)) == 2
    assert len(unloads(fake)) == 2
    assert TAG not in fake.resident()


async def test_an_unload_owed_is_sent_when_the_actor_is_torn_down(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake, keep_alive=-1) as r:
        await r.start_running()
    assert len(unloads(fake)) == 1  # cancelled without a stop: the pin is not left behind
    assert TAG not in fake.resident()


async def test_a_load_answered_but_not_in_ps_owes_no_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Issue 9 item 7: Ollama answered the load 200, but /api/ps then does not list the model
    (it expired before the look). Nothing of ours is resident, so nothing is owed: a model a
    foreign client loads meanwhile is left alone at stop and at unload."""
    async with rig(fake, keep_alive="1s") as r:
        r.line.ps_delay_s = 1.5  # the confirmation comes after the 1 s keep_alive ran out
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.DEGRADED, "load failed: ollama answered the load, but")
        r.line.ps_delay_s = 0.0
        foreign = await fake.transport().handle_async_request(
            httpx.Request("POST", "http://ollama/api/generate", json=load_body(-1))
        )
        assert foreign.status_code == 200
        assert TAG in fake.resident()
        await r.stop()
        await r.unload()
    assert len(loads(fake)) == 2  # ours, then the foreign client's
    assert unloads(fake) == []
    assert TAG in fake.resident()
