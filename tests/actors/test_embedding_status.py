"""What an embedding program reads of its instances (issue 19 item 6), under trio's
MockClock on a `FakeFleet`: `status` and `statuses` are plain functions (the awaited
spelling still works, deprecated), the handle says its ``role``, a wait raises at once when
the instance can no longer get there, and a subscriber that falls behind is told how many
events it lost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from actors.managed_support import chat, fake_fleet_config
from inferactors import (
    Event,
    EventsLost,
    InferRuntime,
    InstanceDown,
    InstanceState,
    InstanceStatus,
    ProcessStarted,
    RestartPolicy,
    UnknownInstance,
    open_runtime,
)
from inferactors._actors.runtime_status import down_for_good
from inferactors.testing import FakeFleet

POLICY = RestartPolicy(max_restarts=1, base_s=1.0, cap_s=1.0, jitter=0.0)


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet()


@pytest.fixture
async def runtime(tmp_path: Path, tiny_gguf: Path, fleet: FakeFleet) -> AsyncIterator[InferRuntime]:
    config = fake_fleet_config(tmp_path, tiny_gguf, POLICY)
    async with open_runtime(config, node_id="embed", edges=fleet.edges()) as opened:
        yield opened


async def test_status_and_statuses_are_plain_calls(
    runtime: InferRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.load(chat(8201, role="planner"))
    assert handle.role == "planner" == handle.workload_id
    now = runtime.status(handle)  # plain calls: no message, no wait
    every = runtime.statuses()
    assert isinstance(now, InstanceStatus)
    assert now.state is InstanceState.LOADED
    assert every == {handle: now}
    assert [h.role for h in every] == ["planner"]


async def test_a_wait_for_running_raises_at_once_when_the_supervisor_gives_up(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    """Each spawn crashes while its server still loads: after one restart the supervisor
    gives up, and the wait for Running, begun at the first start, ends then."""
    fleet.load_s = 1000.0  # never ready on its own
    events = await runtime.subscribe(100)
    handle = await runtime.load(chat(8202))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_crash_every_spawn, events, fleet)
        await runtime.start(handle)
        started = trio.current_time()
        with trio.fail_after(3600), pytest.raises(InstanceDown) as down:
            await runtime.wait_state(handle, InstanceState.RUNNING)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - started < 5.0  # one backoff of 1 s, not the whole hour
    assert len(fleet.children) == 2
    assert down.value.why.startswith("gave up: ")
    assert "will not become running: gave up" in str(down.value)
    # a wait begun after the give-up raises before it waits at all
    with trio.CancelScope() as scope:
        scope.deadline = trio.current_time()
        with pytest.raises(InstanceDown):
            await runtime.wait_state(handle, InstanceState.DEGRADED)
    assert (await runtime.wait_state(handle, InstanceState.EXITED)).state is InstanceState.EXITED


async def _crash_every_spawn(events: trio.MemoryReceiveChannel[Event], fleet: FakeFleet) -> None:
    async for event in events:
        if isinstance(event, ProcessStarted):
            await trio.sleep(0.5)
            fleet.last.crash(exit_code=3)


async def test_a_wait_after_a_new_start_waits_despite_the_old_give_up(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.load(chat(8203))
    await runtime.start(handle)
    await runtime.wait_state(handle, InstanceState.RUNNING)
    for _ in range(2):
        fleet.last.crash(exit_code=3)
        await trio.sleep(5)
    assert runtime.status(handle).supervision is not None
    await runtime.start(handle)  # the operator's start: the note stays, the wait goes on
    status = await runtime.wait_state(handle, InstanceState.RUNNING)
    assert status.state is InstanceState.RUNNING


async def test_a_wait_for_an_unloaded_instance_raises_unknown(
    runtime: InferRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.load(chat(8204))
    await runtime.unload(handle)
    with pytest.raises(UnknownInstance):
        await runtime.wait_state(handle, InstanceState.RUNNING)


@pytest.mark.parametrize(
    ("status", "why"),
    [
        (InstanceStatus(InstanceState.EXITED, stop_reason="tampered"), "held down after a stop"),
        (InstanceStatus(InstanceState.EXITED, stop_reason="exposure"), "held down after a stop"),
        (
            InstanceStatus(
                InstanceState.EXITED,
                stop_reason="config-error",
                supervision="gave up: config-error: the same start-up failure twice",
            ),
            "gave up: config-error",
        ),
        (InstanceStatus(InstanceState.EXITED, stop_reason="requested"), None),
        (InstanceStatus(InstanceState.EXITED, supervision="restarting in 2.0 s"), None),
        (InstanceStatus(InstanceState.DEGRADED, supervision="gave up: budget spent"), None),
        (InstanceStatus(InstanceState.LOADED), None),
    ],
)
def test_down_for_good_names_what_only_an_operator_undoes(
    status: InstanceStatus, why: str | None
) -> None:
    found = down_for_good(status)
    if why is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(why)


async def test_a_subscriber_that_falls_behind_is_told_how_many_events_it_lost(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    slow = await runtime.subscribe(buffer=2)
    keeping = await runtime.subscribe(buffer=1000)
    handle = await runtime.load(chat(8205))
    await runtime.start(handle)
    await runtime.wait_state(handle, InstanceState.RUNNING)
    await trio.sleep(1)  # the events on their way are delivered
    everything = _drain(keeping)
    assert len(everything) >= 4
    first = [slow.receive_nowait(), slow.receive_nowait()]
    assert first == everything[:2]  # the oldest were kept, the newest dropped
    with pytest.raises(trio.WouldBlock):
        slow.receive_nowait()
    await runtime.stop(handle, 1.0)  # more events: the marker comes first, then they do
    await trio.sleep(1)
    marker = slow.receive_nowait()
    assert isinstance(marker, EventsLost)
    assert marker.count == len(everything) - 2
    after = _drain(keeping)
    assert len(after) > 1
    assert slow.receive_nowait() == after[0]  # then the buffer was full again
    with pytest.raises(trio.WouldBlock):
        slow.receive_nowait()


def _drain(events: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    seen = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except trio.WouldBlock:
            return seen


async def test_a_status_names_its_endpoint_and_model(
    runtime: InferRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.load(chat(8205))
    status = runtime.status(handle)
    assert (status.endpoint, status.model) == ("http://127.0.0.1:8205", "tiny")
    assert runtime.statuses()[handle].endpoint == await runtime.endpoint(handle)
