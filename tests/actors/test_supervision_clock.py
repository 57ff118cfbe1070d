"""Supervision timing under trio's MockClock(autojump_threshold=0), on a fake fleet.

The runtime runs for real (actors, supervisor, monitor, policy); only its I/O edges are
fakes (`inferactors.testing.FakeFleet`), so every delay is exact virtual time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from actors.managed_support import ClockEvents, fake_fleet_config
from inferactors import (
    DeepHealthFailed,
    GaveUp,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InvalidState,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    RestartType,
    ServeArgs,
    StateChanged,
    StopReason,
    Supervision,
    Watchdog,
    open_runtime,
)
from inferactors._actors.runtime import InstanceHandle
from inferactors._events import RestartFailed
from inferactors.testing import FakeFleet

PORT = 18500
REFERENCE = RestartPolicy(max_restarts=2, base_s=0.3, cap_s=1.0, jitter=0.0)


@pytest.fixture
def config(tmp_path: Path, tiny_gguf: Path) -> InferConfig:
    return fake_fleet_config(tmp_path, tiny_gguf, REFERENCE)


SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)


@attrs.define
class Harness(ClockEvents):
    def drain(self) -> None:
        """Move every event already delivered into ``seen``."""
        while True:
            try:
                self.seen.append(self.events.receive_nowait())
            except trio.WouldBlock:
                return

    async def running(self, handle: InstanceHandle) -> None:
        """Wait until the instance is Running, with every event so far in ``seen``."""
        with trio.move_on_after(1000):
            await self.runtime.wait_state(handle, InstanceState.RUNNING)
            self.drain()
            return
        self.drain()
        raise AssertionError(f"not running; seen: {self.seen}")


@pytest.fixture
async def harness(config: InferConfig) -> AsyncIterator[Harness]:
    fleet = FakeFleet()
    async with open_runtime(config, node_id="clock", edges=fleet.edges()) as runtime:
        events = await runtime.subscribe(buffer=1000)
        yield Harness(runtime, fleet, events, trio.current_time())


async def load_running(h: Harness, supervision: Supervision | None = None) -> InstanceHandle:
    handle = await h.runtime.load(SPEC, supervision)
    await h.runtime.start(handle)
    await h.running(handle)
    return handle


async def test_reference_schedule_backoff_restarts_then_gives_up(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    handle = await load_running(h)
    t0 = trio.current_time()

    h.fleet.last.crash(exit_code=1)
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.CRASH
    scheduled = await h.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert scheduled.attempt == 1
    assert scheduled.delay_s == pytest.approx(0.3)
    assert (h.runtime.status(handle)).state is InstanceState.EXITED
    await h.next(ProcessStarted)
    assert trio.current_time() - t0 == pytest.approx(0.3)  # "after 350 ms: Restarted 1"
    await h.running(handle)

    t1 = trio.current_time()
    h.fleet.last.crash(exit_code=1)
    scheduled = await h.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert scheduled.attempt == 2
    assert scheduled.delay_s == pytest.approx(0.6)
    await h.next(ProcessStarted)
    assert trio.current_time() - t1 == pytest.approx(0.6)  # "after 650 ms: Restarted 2"
    await h.running(handle)

    h.fleet.last.crash(signal=6)
    gave_up = await h.next(GaveUp)
    assert isinstance(gave_up, GaveUp)
    assert gave_up.attempts == 2
    await trio.sleep(10)
    assert len(h.fleet.children) == 3  # nothing more was spawned
    status = h.runtime.status(handle)
    assert status.state is InstanceState.EXITED
    assert status.supervision is not None
    assert status.supervision.startswith("gave up")
    assert status.stop_reason == "crash"


async def test_an_operator_stop_is_not_a_fault(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await load_running(harness)
    evidence = await harness.runtime.stop(handle, 1.0)
    assert evidence.signal == 15
    await trio.sleep(100)
    assert not any(isinstance(e, RestartScheduled) for e in harness.seen)
    assert len(harness.fleet.children) == 1
    status = harness.runtime.status(handle)
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "requested")


async def test_a_stop_during_backoff_cancels_the_pending_restart(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """A stop while a restart waits in backoff is the operator's stop: it is answered with
    the last exit's evidence (before: refused as "not running"), the view says stopped as
    requested with no supervisor note, and the restart never comes."""
    handle = await load_running(harness)
    crashed = harness.fleet.last
    crashed.crash()
    await harness.next(RestartScheduled)
    evidence = await harness.runtime.stop(handle)
    assert (evidence.pid, evidence.exit_code) == (crashed.pid, 1)
    status = harness.runtime.status(handle)
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "requested")
    assert status.supervision is None
    await trio.sleep(5)
    assert len(harness.fleet.children) == 1
    assert (harness.runtime.status(handle)).stop_reason == "requested"
    with pytest.raises(InvalidState, match="not running"):  # stopped already
        await harness.runtime.stop(handle)


async def test_a_plain_start_keeps_the_budget_and_reset_restarts_refills_it(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    handle = await load_running(h)
    for _ in range(2):
        h.fleet.last.crash()
        await h.next(ProcessStarted)
        await h.running(handle)
    h.fleet.last.crash()
    await h.next(GaveUp)
    await h.runtime.start(handle)  # plain start: budget still spent
    await h.running(handle)
    h.fleet.last.crash()
    await h.next(GaveUp)
    await h.runtime.reset_restarts(handle)
    await h.runtime.start(handle)
    await h.running(handle)
    h.fleet.last.crash()
    scheduled = await h.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert scheduled.attempt == 1


async def test_the_budget_refills_after_stable_after_s_of_running(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    policy = attrs.evolve(REFERENCE, stable_after_s=60.0)
    handle = await load_running(h, Supervision(restart=policy))
    h.fleet.last.crash()
    await h.next(ProcessStarted)
    await h.running(handle)
    await trio.sleep(30)
    crashed_at = trio.current_time()
    h.fleet.last.crash()  # up 30 s: not stable, attempt 2
    scheduled = await _scheduled_since(h, crashed_at)
    assert scheduled.attempt == 2
    await h.next(ProcessStarted)
    await h.running(handle)
    await trio.sleep(61)
    crashed_at = trio.current_time()
    h.fleet.last.crash()  # up 61 s: stable, the budget was refilled
    scheduled = await _scheduled_since(h, crashed_at)
    assert scheduled.attempt == 1


async def _scheduled_since(h: Harness, at: float) -> RestartScheduled:
    """The restart scheduled for a crash at ``at`` (an earlier restart's event, still
    queued behind the ProcessStarted it led to, is passed over)."""
    while True:
        event = await h.next(RestartScheduled)
        assert isinstance(event, RestartScheduled)
        if event.at >= at:
            return event


async def test_restart_intensity_gives_up_within_the_window(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    policy = RestartPolicy(
        max_restarts=100, base_s=0.1, cap_s=0.1, intensity=3, period_s=10.0, jitter=0.0
    )
    handle = await load_running(h, Supervision(restart=policy))
    for _ in range(3):
        h.fleet.last.crash()
        await h.next(ProcessStarted)
        await h.running(handle)
    h.fleet.last.crash()
    gave_up = await h.next(GaveUp)
    assert isinstance(gave_up, GaveUp)
    assert "intensity" in gave_up.why


async def test_restart_intensity_window_slides(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    policy = RestartPolicy(
        max_restarts=100, base_s=0.1, cap_s=0.1, intensity=2, period_s=10.0, jitter=0.0
    )
    handle = await load_running(h, Supervision(restart=policy))
    for _ in range(5):  # one crash every 6 s: never 2 within 10 s... then 2 within 10 s
        await trio.sleep(6)
        h.fleet.last.crash()
        await h.next(ProcessStarted)
        await h.running(handle)
    assert not any(isinstance(e, GaveUp) for e in h.seen)
    h.fleet.last.crash()  # 0.1 s after the last restart: 2 within 10 s
    await h.next(GaveUp)


@pytest.mark.parametrize(
    ("restart_type", "exit_code", "restarted"),
    [
        (RestartType.PERMANENT, 0, True),
        (RestartType.TRANSIENT, 0, False),
        (RestartType.TRANSIENT, 3, True),
        (RestartType.TEMPORARY, 3, False),
    ],
)
async def test_restart_types(
    harness: Harness,
    autojump_clock: trio.testing.MockClock,
    restart_type: RestartType,
    exit_code: int,
    restarted: bool,
) -> None:
    policy = attrs.evolve(REFERENCE, restart_type=restart_type)
    await load_running(harness, Supervision(restart=policy))
    harness.fleet.last.crash(exit_code=exit_code)
    await harness.next(ProcessExited)
    await trio.sleep(5)
    assert (len(harness.fleet.children) == 2) is restarted


async def test_never_restarts_over_an_occupied_port(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    await load_running(h)
    h.fleet.occupied.add(PORT)
    h.fleet.last.crash()
    failed = await h.next(RestartFailed)
    assert isinstance(failed, RestartFailed)
    assert "already taken" in failed.why
    await h.next(GaveUp)
    assert len(h.fleet.children) == 1


async def test_readiness_deadline_kills_and_counts(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    h.fleet.load_s = None  # 503 "Loading model" forever (FC-06)
    handle = await h.runtime.load(SPEC, Supervision(readiness_timeout_s=15.0))
    t0 = trio.current_time()
    await h.runtime.start(handle)
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.READINESS_TIMEOUT
    assert trio.current_time() - t0 == pytest.approx(15.0, abs=0.01)
    scheduled = await h.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert scheduled.attempt == 1


async def test_a_readiness_deadline_heard_late_gives_the_time_lost_back_before_killing(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """The readiness timer fires 4 s late (our loop did not run: here the clock jumps past
    the deadline while no task runs): the server is not killed at once on what we could
    not watch, but gets those 4 s back from then; before, it was killed the moment the
    late timer was heard."""
    h = harness
    h.fleet.load_s = None  # 503 "Loading model" forever (FC-06)
    handle = await h.runtime.load(SPEC, Supervision(readiness_timeout_s=15.0))
    await h.runtime.start(handle)
    t0 = h.fleet.last.started_at
    await trio.sleep_until(t0 + 14.5)
    autojump_clock.autojump_threshold = float("inf")  # nothing runs while the clock jumps
    autojump_clock.jump(4.5)  # the deadline (t0 + 15) passed 4 s ago
    await trio.testing.wait_all_tasks_blocked()
    heard = trio.current_time()
    autojump_clock.autojump_threshold = 0.0
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.READINESS_TIMEOUT
    assert exited.at == pytest.approx(heard + 4.0, abs=0.01)


async def test_status_shows_loading_progress(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    h.fleet.load_s = 20.0
    handle = await h.runtime.load(SPEC)
    await h.runtime.start(handle)
    await trio.sleep(5)
    status = h.runtime.status(handle)
    assert (status.state, status.detail) == (InstanceState.DEGRADED, "loading model")
    assert status.last_probe == "loading"
    assert status.uptime_s == pytest.approx(5.0, abs=0.2)
    await h.running(handle)
    assert trio.current_time() - h.fleet.last.started_at == pytest.approx(20.0, abs=0.11)


async def test_watchdog_kills_a_server_whose_completions_start_to_hang(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    watchdog = Watchdog(interval_s=10.0, timeout_s=5.0, failures=2)
    handle = await load_running(h, Supervision(watchdog=watchdog))
    t0 = trio.current_time()
    h.fleet.last.hang_completions = True  # /health still fine, completions hang (FC-04)
    failed = await h.next(DeepHealthFailed)
    assert isinstance(failed, DeepHealthFailed)
    assert failed.consecutive == 1
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.HEALTH_KILL
    assert trio.current_time() - t0 == pytest.approx(30.0, abs=0.5)  # 2 x (10 s + 5 s)
    await h.next(RestartScheduled)
    assert handle.instance_id == exited.instance_id


async def test_a_server_whose_completions_hang_from_the_start_is_never_ready(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    h.fleet.hang_completions = True  # /health 200 but no token ever (FC-07)
    handle = await h.runtime.load(SPEC, Supervision(readiness_timeout_s=20.0))
    await h.runtime.start(handle)
    await trio.sleep(10)
    status = h.runtime.status(handle)
    assert status.state is InstanceState.DEGRADED
    assert status.detail is not None
    assert status.detail.startswith("starting:")
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.READINESS_TIMEOUT


async def test_a_ready_server_that_turns_unhealthy_is_killed_and_restarted(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    handle = await load_running(h)
    t0 = trio.current_time()
    h.fleet.last.dead_generator = True  # FC-07, newer mlx-lm: /health 503 "unavailable"
    exited = await h.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.HEALTH_KILL
    assert 3.0 <= trio.current_time() - t0 <= 4.5  # unhealthy for 3 s, seen within a probe
    await h.next(ProcessStarted)
    await h.running(handle)
    assert len(h.fleet.children) == 2


async def test_state_changes_are_events(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h = harness
    h.fleet.load_s = 1.0
    await load_running(h)
    states = [(e.old, e.new) for e in h.seen if isinstance(e, StateChanged)]
    h.seen.clear()
    while True:
        try:
            event = h.events.receive_nowait()
        except trio.WouldBlock:
            break
        if isinstance(event, StateChanged):
            states.append((event.old, event.new))
    assert states[0] == (InstanceState.LOADED, InstanceState.DEGRADED)
    assert states[-1][1] is InstanceState.RUNNING
