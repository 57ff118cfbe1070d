"""The front door's scheduler over fake llama-servers, under MockClock: on-demand starts
that wait for Running and join, swaps that never cut a request in flight, idle TTL, the
bounds of every wait, withdrawn waits, abandoned starts, the memory gate after an
eviction. Its stops (the one stop path, drains and shutdown) are
``test_front_door_stops.py``."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import trio
import trio.testing

from actors.front_door_support import FIRST_PORT, MiB, door_rig
from inferactors import FrontDoorRefused, InferConfig, InstanceState, RefusalKind, StopReason
from inferactors._actors.front_door_seam import Grant, Residency
from inferactors._events import (
    FootprintDrift,
    OnDemandStart,
    ProcessExited,
    ProcessStarted,
    QueuedRequestRefused,
    ResidencyStop,
)
from inferactors._policy.scheduler_state import SlotRules
from inferactors.testing import FakeFleet

pytestmark = pytest.mark.usefixtures("inline_threads")

Config = Callable[[], InferConfig]


async def test_the_first_request_starts_the_model_and_waits_for_running(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(load_s=3.0)) as rig:
        assert not rig.fleet.children  # on demand: run starts nothing
        assert rig.door.models()[0].residency is Residency.NOT_LOADED
        began = trio.current_time()
        grant = await rig.door.acquire("a")
        assert trio.current_time() - began >= 3.0  # not before its first token
        assert grant.upstream.base_url == f"http://127.0.0.1:{FIRST_PORT}"
        assert grant.upstream.served_model == ""  # llama-server serves the one model it has
        status = rig.runtime.status(rig.handles["a"])
        assert status.state is InstanceState.RUNNING
        assert rig.door.residency()["a"].in_flight == 1
        grant.done()
        grant.done()  # a second call does nothing
        await trio.sleep(0.1)
        assert rig.door.residency()["a"].in_flight == 0
        [start] = rig.of(OnDemandStart, "a")
        assert start.trigger == "request"
        assert start.gate_bytes is None


async def test_concurrent_requests_join_one_start(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    grants: list[Grant] = []
    async with door_rig(make_config(), FakeFleet(load_s=2.0)) as rig:

        async def one() -> None:
            grants.append(await rig.door.acquire("a"))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
        assert len(grants) == 5
        assert rig.spawned("a") == 1
        assert rig.door.residency()["a"].in_flight == 5
        for grant in grants:
            grant.done()


async def test_a_swap_waits_for_the_request_in_flight_then_evicts(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(footprint_mib=600)) as rig:
        held = await rig.door.acquire("a")
        got: list[Grant] = []

        async def want_b() -> None:
            got.append(await rig.door.acquire("b"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(want_b)
            await trio.sleep(30.0)
            assert rig.alive("a")  # a request in flight is never cut
            assert rig.spawned("b") == 0
            assert rig.door.residency()["b"].queued == 1
            released = trio.current_time()
            held.done()
        [grant] = got
        assert grant.upstream.role == "b"
        assert not rig.alive("a")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.EVICTED
        assert stop.detail == "to make room for 'b'"
        assert stop.at >= released
        [b_start] = rig.of(OnDemandStart, "b")
        assert b_start.gate_bytes == 600 * MiB
        exited = [e for e in rig.of(ProcessExited, "a")]
        started = rig.of(ProcessStarted, "b")
        assert exited[0].at <= started[0].at  # never both resident
        assert rig.door.residency()["a"].last_stop == "evicted"
        grant.done()


async def test_idle_ttl_stops_after_the_last_response(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    rules = {"a": SlotRules(name="a", on_demand=True, idle_ttl_s=30.0)}
    async with door_rig(make_config(), FakeFleet(), ["a"], rules=rules) as rig:
        grant = await rig.door.acquire("a")
        await trio.sleep(100.0)  # a long request: no TTL while in flight
        assert rig.alive("a")
        ended = trio.current_time()
        grant.done()
        await trio.sleep(1.0)
        left = rig.door.residency()["a"].ttl_left_s
        assert left is not None
        assert 28.5 < left <= 29.0
        await trio.sleep(28.5)
        assert rig.alive("a")
        await trio.sleep(1.0)
        assert not rig.alive("a")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.TTL
        assert stop.at == pytest.approx(ended + 30.0)
        again = await rig.door.acquire("a")  # the next request starts it again
        assert rig.spawned("a") == 2
        again.done()


async def test_a_wait_past_its_bound_is_refused_with_retry_after(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), max_wait_s=5.0, retry_after_s=2.0) as rig:
        held = await rig.door.acquire("a")
        began = trio.current_time()
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("b")
        assert trio.current_time() - began == pytest.approx(5.0)
        error = refused.value
        assert error.kind is RefusalKind.WAIT_TIMEOUT
        assert error.status == 503
        assert error.retry_after_s == 2.0
        assert error.model == "b"
        [event] = rig.of(QueuedRequestRefused, "b")
        assert event.kind == "wait-timeout"
        assert event.waited_s == pytest.approx(5.0)
        assert rig.alive("a")
        assert rig.spawned("b") == 0
        held.done()


async def test_a_client_that_leaves_withdraws_only_its_own_wait(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(load_s=10.0)) as rig:
        got: list[Grant] = []

        async def stays() -> None:
            got.append(await rig.door.acquire("a"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stays)
            with trio.move_on_after(2.0):
                await rig.door.acquire("a")
        assert len(got) == 1
        assert rig.spawned("a") == 1
        assert rig.door.residency()["a"].in_flight == 1  # the leaver was never counted
        got[0].done()


async def test_an_abandoned_start_is_cancelled_when_another_model_needs_the_room(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(load_s=20.0)) as rig:
        with trio.move_on_after(1.0):
            await rig.door.acquire("a")  # the client leaves while a loads
        assert rig.alive("a")  # nobody needs the room yet: the start goes on
        with trio.fail_after(30.0):
            grant = await rig.door.acquire("b")
        assert not rig.alive("a")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.EVICTED
        assert rig.door.residency()["a"].residency is Residency.NOT_LOADED
        grant.done()


async def test_memory_that_does_not_come_back_refuses_the_start(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(footprint_mib=600, release_s=None)  # a leaked footprint
    async with door_rig(make_config(), fleet, total_mib=1100) as rig:
        (await rig.door.acquire("a")).done()
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("b")
        assert refused.value.kind is RefusalKind.MEMORY_NOT_RECOVERED
        assert refused.value.status == 503
        assert "memory not recovered" in str(refused.value)
        assert rig.spawned("b") == 0  # never a start into a sure OOM


async def test_memory_that_comes_back_late_delays_the_start(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(footprint_mib=600, release_s=4.0)
    async with door_rig(make_config(), fleet, total_mib=1100) as rig:
        (await rig.door.acquire("a")).done()
        grant = await rig.door.acquire("b")
        exited = rig.of(ProcessExited, "a")[0].at
        started = rig.of(ProcessStarted, "b")[0].at
        assert started - exited >= 4.0
        grant.done()


async def test_a_slow_exit_is_waited_for_before_the_next_start(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(exit_s=1.5)) as rig:
        (await rig.door.acquire("a")).done()
        grant = await rig.door.acquire("b")
        [stop] = rig.of(ResidencyStop, "a")
        started = rig.of(ProcessStarted, "b")[0].at
        assert started - stop.at >= 1.5
        assert rig.door.models()[0].residency is Residency.NOT_LOADED
        grant.done()


async def test_a_model_that_can_never_fit_is_refused_at_once(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), budget_mib=500) as rig:
        began = trio.current_time()
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("a")
        assert trio.current_time() == began
        assert refused.value.kind is RefusalKind.NEVER_FITS
        assert refused.value.retry_after_s is None
        assert "needs 629.1 MB of memory but the whole memory budget is 524.3 MB" in str(
            refused.value
        )


async def test_an_unknown_model_names_the_models_that_exist(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet()) as rig:
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("ghost")
        assert refused.value.status == 404
        assert 'the models here are: "a", "b"' in str(refused.value)


async def test_a_start_that_fails_refuses_its_waiters_in_the_servers_words(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(spawn_fails=True)) as rig:
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("a")
        assert refused.value.kind is RefusalKind.START_FAILED
        assert "the program cannot start" in str(refused.value)
        assert rig.door.residency()["a"].residency is Residency.NOT_LOADED


async def test_measured_memory_is_taken_and_drift_is_an_event(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(footprint_mib=300), footprint_mib=100) as rig:
        grant = await rig.door.acquire("a")
        await trio.sleep(5.0)  # two measures
        view = rig.door.residency()["a"]
        assert view.measured_bytes == 300 * MiB
        assert view.declared_bytes == 100 * MiB
        [drift] = rig.of(FootprintDrift, "a")
        assert drift.measured_bytes == 300 * MiB
        grant.done()


async def test_preload_starts_at_open_and_idles_out(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    rules = {"a": SlotRules(name="a", on_demand=True, idle_ttl_s=60.0)}
    async with door_rig(make_config(), FakeFleet(), ["a"], rules=rules, preload=("a",)) as rig:
        await trio.sleep(1.0)
        assert rig.alive("a")
        [start] = rig.of(OnDemandStart, "a")
        assert start.trigger == "operator"
        await trio.sleep(61.0)
        assert not rig.alive("a")
        assert math.isclose(rig.of(ResidencyStop, "a")[0].at, 60.0, abs_tol=1.0)


async def test_an_always_on_instance_still_loading_counts_in_the_ledger(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    rules = {
        "always": SlotRules(name="always", on_demand=False),
        "lazy": SlotRules(name="lazy", on_demand=True, idle_ttl_s=math.inf),
    }
    fleet = FakeFleet(load_s=30.0)
    async with door_rig(make_config(), fleet, ["always", "lazy"], rules=rules) as rig:
        await rig.runtime.start(rig.handles["always"])  # as run does: it loads for 30 s
        await trio.sleep(1.0)
        assert rig.door.residency()["always"].residency is Residency.STARTING
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("lazy")
        assert refused.value.kind is RefusalKind.NEVER_FITS
        with trio.fail_after(60.0):
            grant = await rig.door.acquire("always")  # waits for it to serve
        assert rig.door.residency()["always"].residency is Residency.RESIDENT
        grant.done()


async def test_a_wait_that_began_before_the_queue_counts_from_its_arrival(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(), max_wait_s=5.0) as rig:
        held = await rig.door.acquire("a")
        came = trio.current_time() - 4.0  # it waited 4 s for the scheduler to open
        with pytest.raises(FrontDoorRefused) as refused:
            await rig.door.acquire("b", since=came)
        assert trio.current_time() - came == pytest.approx(5.0)
        assert refused.value.kind is RefusalKind.WAIT_TIMEOUT
        [event] = rig.of(QueuedRequestRefused, "b")
        assert event.waited_s == pytest.approx(5.0)
        held.done()
        grant = await rig.door.acquire("a", since=trio.current_time() - 60.0)
        assert grant.upstream.role == "a"  # resident: granted at once, however long before
        grant.done()


async def test_a_server_is_measured_as_soon_as_it_is_resident(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with door_rig(make_config(), FakeFleet(footprint_mib=300, load_s=0.5)) as rig:
        grant = await rig.door.acquire("a")  # resident at 0.5 s; the 2 s interval not over
        await trio.sleep(0.01)
        assert rig.door.residency()["a"].measured_bytes == 300 * MiB
        grant.done()


async def test_each_server_is_measured_as_soon_as_it_is_resident_beside_another(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(footprint_mib=300, load_s=0.5)
    async with door_rig(make_config(), fleet, footprint_mib=300) as rig:
        first = await rig.door.acquire("a")  # resident at 0.5 s, measured then
        second = await rig.door.acquire("b")  # resident at 1.0 s; the next interval at 2.5 s
        await trio.sleep(0.01)
        assert trio.current_time() < 2.0
        assert rig.door.residency()["b"].measured_bytes == 300 * MiB
        assert rig.door.residency_of("b") == rig.door.residency()["b"]
        assert rig.door.residency_of("nope") is None
        first.done()
        second.done()
