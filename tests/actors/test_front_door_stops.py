"""The front door's stops over fake llama-servers, under MockClock: the one stop path. An
operator's stop drains its requests in flight first (no new grant meanwhile), a drain that
runs out stops the server anyway and marks the requests it cut, closing drains then stops
everything, and each of the scheduler's stops (TTL, eviction, reload) reaches the process
with its reason. Split from ``test_front_door_clock.py``."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import trio
import trio.testing

from actors.front_door_support import Rig, door_rig
from inferactors import FrontDoorRefused, InferConfig, InstanceState, RefusalKind, StopReason
from inferactors._actors.front_door_seam import Residency
from inferactors._events import ProcessExited, ResidencyStop
from inferactors._policy.scheduler_state import SlotRules
from inferactors.testing import FakeFleet

pytestmark = pytest.mark.usefixtures("inline_threads")

Config = Callable[[], InferConfig]


async def test_an_operators_stop_drains_then_stops_with_its_reason(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), drain_timeout_s=60.0) as rig:
        held = await rig.door.acquire("a")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rig.door.stop, "a", StopReason.REQUESTED)
            await trio.sleep(20.0)
            assert rig.alive("a")
            assert rig.door.residency()["a"].residency is Residency.STOPPING
            with pytest.raises(FrontDoorRefused) as refused:  # no new grant while draining
                with trio.fail_after(1.0):
                    await rig.door.acquire("a")
            assert refused.value.kind is RefusalKind.STOPPING
            held.done()
        assert not rig.alive("a")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.REQUESTED
        assert held.cut_by() is None  # it ended within the drain: nothing cut it


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (StopReason.REQUESTED, "stopped by an operator"),
        (StopReason.RELOAD, "stopped by a reload that changed or removed it"),
    ],
)
async def test_a_stop_that_outlasts_the_drain_marks_the_requests_it_cut(
    make_config: Config, autojump_clock: trio.testing.MockClock, reason: StopReason, words: str
) -> None:
    async with door_rig(make_config(), FakeFleet(), budget_mib=2000, drain_timeout_s=5.0) as rig:
        cut, ended = await rig.door.acquire("a"), await rig.door.acquire("a")
        other = await rig.door.acquire("b")
        ended.done()
        await rig.door.stop("a", reason)
        assert not rig.alive("a")
        expected = f"the instance was {words} before this answer ended (drain timed out)"
        assert cut.cut_by() == expected
        assert ended.cut_by() is None  # it ended before the stop
        assert other.cut_by() is None  # another instance's request
        cut.done()
        other.done()
        await trio.sleep(0.1)
        assert rig.door.residency()["a"].in_flight == 0


async def test_a_drain_that_takes_too_long_stops_anyway(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), drain_timeout_s=5.0) as rig:
        held = await rig.door.acquire("a")
        began = trio.current_time()
        await rig.door.stop("a", StopReason.RELOAD)
        assert trio.current_time() - began == pytest.approx(5.0, abs=0.5)
        assert not rig.alive("a")
        held.done()  # the request ended with its server: its grant is still given back
        await trio.sleep(0.1)
        assert rig.door.residency()["a"].in_flight == 0


async def test_closing_drains_requests_in_flight_then_stops_everything(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), drain_timeout_s=60.0) as rig:
        held = await rig.door.acquire("a")
        closed = trio.Event()

        async def close() -> None:
            await rig.door.close()
            closed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close)
            await trio.sleep(10.0)
            assert not closed.is_set()
            assert rig.alive("a")
            held.done()
        assert not rig.alive("a")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.SHUTDOWN


async def _stopped_for(rig: Rig, role: str) -> tuple[StopReason, str | None, str | None]:
    """The reason of ``role``'s last `ProcessExited`, and its status' reason and words."""
    await trio.sleep(0.1)  # the rig's collector has heard the exit
    exited = rig.of(ProcessExited, role)[-1]
    status = rig.runtime.status(rig.handles[role])
    assert status.state is InstanceState.EXITED
    return exited.reason, status.stop_reason, status.detail


async def test_the_schedulers_stops_reach_the_process_with_their_reason(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    rules = {
        "a": SlotRules(name="a", on_demand=True, idle_ttl_s=30.0),
        "b": SlotRules(name="b", on_demand=True, idle_ttl_s=math.inf),
    }
    async with door_rig(make_config(), FakeFleet(footprint_mib=600), rules=rules) as rig:
        (await rig.door.acquire("a")).done()
        await trio.sleep(31.0)  # idle past its TTL
        assert await _stopped_for(rig, "a") == (
            StopReason.TTL,
            "ttl",
            "stopped: idle for its TTL (front door)",
        )
        (await rig.door.acquire("b")).done()
        (await rig.door.acquire("a")).done()  # b makes room for a
        assert await _stopped_for(rig, "b") == (
            StopReason.EVICTED,
            "evicted",
            "stopped: evicted to make room for another model (front door)",
        )
        await rig.door.stop("a", StopReason.RELOAD)
        assert await _stopped_for(rig, "a") == (
            StopReason.RELOAD,
            "reload",
            "stopped for a reload that changed or removed it",
        )
        assert [e.reason for e in rig.of(ProcessExited)] == [
            StopReason.TTL,
            StopReason.EVICTED,
            StopReason.RELOAD,
        ]
        assert rig.door.residency()["a"].last_stop == "reload"
        assert rig.door.residency()["b"].last_stop == "evicted"
