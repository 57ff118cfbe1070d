"""What the stateful supervision tests share: the instance, the trio side and the ledger.

One managed llama.cpp instance (`SPEC` under `SUPERVISION`, restart policy `POLICY`) runs on
a `FakeFleet`. `TrioSide` runs its runtime in ``trio.run`` on a thread under a MockClock
whose time moves only while a command runs; `outcome_of`, `concurrently` and `expect` run
commands and judge their answers. `Ledger` records what the operator did, and
`check_restart_limits` checks the restart policy's limits over the event log (pure).
`TrioSide.bugs` makes the probe reports raise on demand (a worker bug, issue 8).
"""

from __future__ import annotations

import bisect
import math
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs
import trio
import trio.testing

from actors.crash_support import BugSwitch
from inferactors import (
    Event,
    GaveUp,
    InferactorsError,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceCrashed,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    ServeArgs,
    StateChanged,
    Supervision,
    Watchdog,
)
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._actors.serving import open_runtime
from inferactors.testing import FakeFleet

T = TypeVar("T")
Job = Callable[[], Awaitable[object]]


PORT = 18620
# max_restarts above intensity, so that both limits can be the one that gives up.
POLICY = RestartPolicy(
    max_restarts=4,
    base_s=0.5,
    cap_s=2.0,
    stable_after_s=60.0,
    intensity=2,
    period_s=10.0,
    jitter=0.0,
)
# Short enough that steps of 0 to 30 s reach the readiness deadline and the watchdog's kill.
READINESS_S = 8.0
SUPERVISION = Supervision(
    restart=POLICY,
    readiness_timeout_s=READINESS_S,
    watchdog=Watchdog(interval_s=3.0, timeout_s=2.0, failures=2),
)
SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)
STOP_GRACE_S = 0.5
ANSWER_BOUND_S = 600.0  # virtual seconds any command may take
LAUNCH_BOUND_S = 60.0  # real seconds
EPSILON_S = 1e-6
EVENT_BUFFER = 100_000


# The invariants on restarts, over the event log (pure).


def supervisor_restarts(events: Sequence[Event], commanded: set[int]) -> list[tuple[int, float]]:
    """``(index of the deciding RestartScheduled, start time)`` of every process that no
    start or restart command spawned; -1 when no decision came before it."""
    decided, restarts = -1, []
    for index, event in enumerate(events):
        if isinstance(event, RestartScheduled):
            decided = index
        elif isinstance(event, ProcessStarted) and event.pid not in commanded:
            restarts.append((decided, event.at))
    return restarts


def refill_points(events: Sequence[Event], stable_after_s: float) -> list[int]:
    """Indexes of events at which the server had been Up for ``stable_after_s`` without a
    break, so the budget may be refilled there (checklist item 57)."""
    since: float | None = None
    points = []
    for index, event in enumerate(events):
        if not isinstance(event, StateChanged | ProcessExited):
            continue
        if since is not None and event.at - since >= stable_after_s - EPSILON_S:
            points.append(index)  # up until this event: the run counts as stable
        if isinstance(event, StateChanged):
            up = event.new is InstanceState.RUNNING
            since = (event.at if since is None else since) if up else None
    return points


def segments(restarts: list[tuple[int, float]], marks: list[int]) -> list[list[float]]:
    """Start times of ``restarts`` grouped by how many ``marks`` precede their decision."""
    groups: dict[int, list[float]] = {}
    for decided, at in restarts:
        groups.setdefault(bisect.bisect_right(marks, decided), []).append(at)
    return list(groups.values())


def check_restart_limits(events: Sequence[Event], commanded: set[int], resets: list[int]) -> None:
    """Assert the policy's limits on the restarts seen in ``events``."""
    restarts = supervisor_restarts(events, commanded)
    decisions = [decided for decided, _ in restarts]
    assert -1 not in decisions, "a process started with no command and no restart decision"
    assert len(set(decisions)) == len(decisions), "one restart decision spawned twice"
    refills = sorted([*resets, *refill_points(events, POLICY.stable_after_s)])
    for group in segments(restarts, refills):
        assert len(group) <= POLICY.max_restarts, f"restarts beyond the budget at {group}"
    for group in segments(restarts, sorted(resets)):
        for first in group:
            inside = [at for at in group if 0 <= at - first < POLICY.period_s - EPSILON_S]
            assert len(inside) <= POLICY.intensity, f"restart intensity exceeded: {inside}"
    for event in events:
        if isinstance(event, RestartScheduled | GaveUp):
            count = event.attempt if isinstance(event, RestartScheduled) else event.attempts
            assert count <= POLICY.max_restarts, event


def check_crashes(events: Sequence[Event], now: float, grace_s: float) -> None:
    """Assert that every `InstanceCrashed` names an injected bug, and that a server live at
    a crash exited within ``grace_s`` of it (where that much time has passed)."""
    live: int | None = None
    for index, event in enumerate(events):
        if isinstance(event, ProcessStarted):
            live = event.pid
        elif isinstance(event, ProcessExited) and event.pid == live:
            live = None
        elif isinstance(event, InstanceCrashed):
            assert "injected" in event.message, f"a crash nobody injected: {event}"
            deadline = event.at + grace_s + EPSILON_S
            if live is None or now < deadline:
                continue
            stopped = [e for e in events[index:] if isinstance(e, ProcessExited) and e.pid == live]
            assert stopped, f"server {live} outlived the crash at {event.at}"
            assert stopped[0].at <= deadline, f"server {live} outlived the crash at {event.at}"


@attrs.define
class Ledger:
    """What the machine did, for the invariants.

    Attributes:
        commanded: pids of processes spawned by start or restart commands.
        halted_at: how many processes existed when the operator last stopped it.
        occupied_at: how many processes existed when a foreign program took the port.
        resets: event-log lengths at each ``reset_restarts``.
    """

    commanded: set[int] = attrs.Factory(set)
    halted_at: int | None = None
    occupied_at: int | None = None
    resets: list[int] = attrs.Factory(list)


# The trio side: a runtime in a thread.


@attrs.frozen
class Live:
    """What the trio thread hands back once the instance is loaded."""

    token: trio.lowlevel.TrioToken
    runtime: InferRuntime
    handle: InstanceHandle
    closing: trio.Event


async def collect(stream: trio.MemoryReceiveChannel[Event], events: list[Event]) -> None:
    async for event in stream:
        events.append(event)


async def serve_side(
    config: InferConfig,
    fleet: FakeFleet,
    bugs: BugSwitch,
    clock: trio.testing.MockClock,
    events: list[Event],
    handoff: queue.Queue[Live | None],
) -> None:
    edges = fleet.edges()
    edges = attrs.evolve(edges, open_prober=bugs.factory(edges.open_prober))
    async with open_runtime(config, node_id="stateful", edges=edges) as runtime:
        handle = await runtime.load(SPEC, SUPERVISION)
        stream = await runtime.subscribe(buffer=EVENT_BUFFER)
        closing = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, stream, events)
            await trio.testing.wait_all_tasks_blocked()
            clock.autojump_threshold = math.inf
            handoff.put(Live(trio.lowlevel.current_trio_token(), runtime, handle, closing))
            await closing.wait()
            nursery.cancel_scope.cancel()


@attrs.define(eq=False)
class TrioSide:
    """A runtime on a `FakeFleet`, run by ``trio.run`` on a thread under a MockClock.

    Virtual time moves only inside `run` (autojump on); between calls the autojump
    threshold is infinite, so the clock stands still while hypothesis picks the next step.
    """

    fleet: FakeFleet
    bugs: BugSwitch
    clock: trio.testing.MockClock
    thread: threading.Thread
    failures: list[BaseException]
    events: list[Event]
    live: Live

    @classmethod
    def launch(cls, config: InferConfig) -> TrioSide:
        fleet, clock = FakeFleet(), trio.testing.MockClock(autojump_threshold=0)
        bugs = BugSwitch()
        failures: list[BaseException] = []
        events: list[Event] = []
        handoff: queue.Queue[Live | None] = queue.Queue()

        def body() -> None:
            try:
                trio.run(serve_side, config, fleet, bugs, clock, events, handoff, clock=clock)
            except BaseException as error:  # the machine's teardown reports it
                failures.append(error)
            finally:
                handoff.put(None)

        thread = threading.Thread(target=body, name="stateful trio side", daemon=True)
        thread.start()
        live = handoff.get(timeout=LAUNCH_BOUND_S)
        if live is None:
            thread.join(LAUNCH_BOUND_S)
            raise AssertionError(f"the runtime did not start: {failures!r}")
        return cls(fleet, bugs, clock, thread, failures, events, live)

    def run(self, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` in trio with time flowing, under a 600 s virtual deadline; then let
        the runtime settle with the clock frozen."""
        try:
            return trio.from_thread.run(self._timed, job, trio_token=self.live.token)
        except (trio.RunFinishedError, trio.Cancelled):
            self.thread.join(LAUNCH_BOUND_S)
            raise AssertionError(f"the runtime died: {self.failures!r}") from None

    def peek(self, look: Callable[[], T]) -> T:
        """Call ``look`` in the trio thread, time frozen."""
        return trio.from_thread.run_sync(look, trio_token=self.live.token)

    def close(self) -> None:
        """Leave ``open_runtime`` (it stops the server) and join the thread."""

        def unfreeze_and_close() -> None:
            self.clock.autojump_threshold = 0.0
            self.live.closing.set()

        try:
            self.peek(unfreeze_and_close)
        except trio.RunFinishedError:
            pass  # it died already; ``failures`` says of what
        self.thread.join(LAUNCH_BOUND_S)
        assert not self.thread.is_alive(), "the runtime did not close"
        assert not self.failures, f"the runtime failed: {self.failures!r}"
        assert not self.fleet.live, "a server outlived open_runtime"

    async def _timed(self, job: Callable[[], Awaitable[T]]) -> T:
        self.clock.autojump_threshold = 0.0
        try:
            with trio.fail_after(ANSWER_BOUND_S):
                result = await job()
        except trio.TooSlowError:
            raise AssertionError(f"no answer within {ANSWER_BOUND_S:g} virtual s") from None
        finally:
            self.clock.autojump_threshold = math.inf
        await trio.testing.wait_all_tasks_blocked()
        return result


async def outcome_of(job: Job) -> object:
    """The job's value, or the `InferactorsError` it raised."""
    try:
        return await job()
    except InferactorsError as error:
        return error


async def concurrently(jobs: Sequence[Job]) -> list[object]:
    """Run ``jobs`` at the same time; their outcomes in order."""
    outcomes: list[object] = [None] * len(jobs)

    async def one(index: int) -> None:
        outcomes[index] = await outcome_of(jobs[index])

    async with trio.open_nursery() as nursery:
        for index in range(len(jobs)):
            nursery.start_soon(one, index)
    return outcomes


def expect(outcome: object, *allowed: type) -> None:
    assert isinstance(outcome, allowed), f"unexpected answer: {outcome!r}"
