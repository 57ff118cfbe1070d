"""A hypothesis state machine drives one supervised instance with random commands and faults.

Issue 3, "Tests": one managed llama.cpp instance runs on a `FakeFleet` (fake processes,
HTTP and net, all inside trio) under ``MockClock(autojump_threshold=0)``. Rules send the
operator's commands (start, stop, restart, reset_restarts, status, deep health, and starts
and stops that race each other), let virtual time pass, and inject faults: crashes (an exit
code or a signal), failing spawns, a foreign program on the port, slow loading, hanging
completions, a server deaf to SIGTERM. After every step the invariants hold:

* never two live processes for the instance; never a spawn while the port is taken;
* no restart after an operator stop, until the next start or restart command;
* supervisor restarts stay inside the policy: at most ``intensity`` within any ``period_s``
  (windows do not span a ``reset_restarts``, which clears the window) and at most
  ``max_restarts`` between two refills (``reset_restarts``, or ``stable_after_s`` of Up);
  every restart follows exactly one `RestartScheduled` decision, and a crash with a full
  budget is always restarted;
* every command is answered, with a value or an `InferactorsError`, within 600 virtual
  seconds (a stop within its grace plus 0.5 s, FC-11); two racing starts spawn at most one
  server; ``status`` never raises and never contradicts the processes.

A state machine is synchronous, so the runtime runs in ``trio.run`` on a thread
(`TrioSide`). Virtual time moves only while a rule runs; between rules the clock is frozen,
and thread hops run inline (`inline_threads`), so every run of an example is the same.
The tests at the end are regression tests for bugs that these faults reached.
"""

from __future__ import annotations

import bisect
import math
import queue
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import attrs
import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from inferactors import (
    BackendError,
    CompletionResult,
    Event,
    GaveUp,
    InferactorsError,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InstanceStatus,
    InvalidState,
    ManagedConfig,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    RunEvidence,
    ServeArgs,
    StateChanged,
    Supervision,
    Watchdog,
)
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._actors.serving import open_runtime
from inferactors._edges.bundle import Edges
from inferactors._edges.spawn import ChildProcess, OpenProcess
from inferactors._models.registry import ModelRegistry
from inferactors._policy.privilege import RunAs
from inferactors.testing import FakeChild, FakeFleet

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
LONGEST_GRACE_S = 3.0  # a stop under way for a health kill or an impatient caller: 3 s
ANSWER_BOUND_S = 600.0  # virtual seconds any command may take
LAUNCH_BOUND_S = 60.0  # real seconds
EPSILON_S = 1e-6
EVENT_BUFFER = 100_000
DURATIONS = st.one_of(
    st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 2.0]),  # around the backoff delays
    st.integers(0, 300).map(lambda tenths: tenths / 10),
)
FAULTS = st.one_of(
    st.tuples(st.just("spawn_fails"), st.booleans()),
    st.tuples(st.just("load_s"), st.sampled_from([0.0, 1.0, 4.0, 20.0, None])),
    st.tuples(st.just("hang_completions"), st.booleans()),
    st.tuples(st.just("ignore_term"), st.booleans()),
)
REACTIONS = st.sampled_from(["nothing", "stop", "start", "restart", "reset_restarts"])
ENDINGS = st.one_of(
    st.tuples(st.sampled_from([0, 1, 2, 134]), st.none()),
    st.tuples(st.none(), st.sampled_from([6, 9, 11, 15])),
)
SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,  # the same 100 programs on every run: a failure reproduces
)


@pytest.fixture
def inline_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``trio.to_thread.run_sync`` work inline, in the trio thread.

    Under ``autojump_threshold=0`` a task waiting for a worker thread counts as blocked, so
    the MockClock leaps to the next deadline (a readiness timer, a backoff, even
    ``fail_after``'s) while the thread runs: virtual time would depend on real thread
    timing. The runtime's thread work here is small file I/O and fake edges.
    """

    async def run_inline(sync_fn: Callable[..., T], *args: object, **_options: object) -> T:
        await trio.lowlevel.checkpoint()
        return sync_fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_inline)


@pytest.fixture(scope="module")
def make_config(
    tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path
) -> Callable[[], InferConfig]:
    """Configs sharing one registry (the tiny model as ``tiny``), each with a fresh data root."""
    registry = tmp_path_factory.mktemp("stateful") / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="tiny")

    def config() -> InferConfig:
        managed = ManagedConfig(
            registry=registry,
            data_root=tmp_path_factory.mktemp("state"),
            serve_program=Path("/bin/true"),  # never run: the fleet fakes spawning
            restart=POLICY,
            readiness_timeout_s=READINESS_S,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=5.0)

    return config


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
    clock: trio.testing.MockClock,
    events: list[Event],
    handoff: queue.Queue[Live | None],
) -> None:
    async with open_runtime(config, node_id="stateful", edges=fleet.edges()) as runtime:
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
    clock: trio.testing.MockClock
    thread: threading.Thread
    failures: list[BaseException]
    events: list[Event]
    live: Live

    @classmethod
    def launch(cls, config: InferConfig) -> TrioSide:
        fleet, clock = FakeFleet(), trio.testing.MockClock(autojump_threshold=0)
        failures: list[BaseException] = []
        events: list[Event] = []
        handoff: queue.Queue[Live | None] = queue.Queue()

        def body() -> None:
            try:
                trio.run(serve_side, config, fleet, clock, events, handoff, clock=clock)
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
        return cls(fleet, clock, thread, failures, events, live)

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


# The state machine.


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


class OneInstance(RuleBasedStateMachine):
    """One managed instance, its fleet, and what the operator did to it."""

    def __init__(self, config: InferConfig) -> None:
        super().__init__()
        self.side = TrioSide.launch(config)
        self.ledger = Ledger()
        runtime, handle = self.side.live.runtime, self.side.live.handle
        self.runtime, self.handle = runtime, handle
        self.start_job: Job = lambda: runtime.start(handle)
        self.stop_job: Job = lambda: runtime.stop(handle, STOP_GRACE_S)

    def teardown(self) -> None:
        self.side.close()

    @property
    def fleet(self) -> FakeFleet:
        return self.side.fleet

    def _commands(self, *jobs: Job) -> tuple[list[object], list[FakeChild], float]:
        """Run ``jobs`` together: their outcomes, the servers spawned meanwhile, and the
        virtual seconds until the last answer."""

        async def run() -> tuple[list[object], list[FakeChild], float]:
            before, began = len(self.fleet.children), trio.current_time()
            outcomes = await concurrently(jobs)
            return outcomes, self.fleet.children[before:], trio.current_time() - began

        return self.side.run(run)

    def _spawned_by_command(self, new: list[FakeChild], count: int) -> None:
        assert len(new) == count, f"{count} accepted starts spawned {len(new)} processes"
        self.ledger.commanded.update(child.pid for child in new)

    def _running_again(self) -> None:
        self.ledger.halted_at = None
        assert len(self.side.peek(lambda: self.fleet.live)) == 1

    def _halted(self) -> None:
        count, live = self.side.peek(lambda: (len(self.fleet.children), self.fleet.live))
        assert not live, "a server runs after an operator stop"
        self.ledger.halted_at = count

    def _fault(self, change: Callable[[FakeFleet], T]) -> T:
        async def apply() -> T:
            return change(self.fleet)

        return self.side.run(apply)

    # Commands.

    @initialize(first=st.booleans())
    def begin(self, first: bool) -> None:
        if first:
            self.start("alone")

    @rule(race=st.sampled_from(["alone", "with a stop", "with a start"]))
    def start(self, race: str) -> None:
        if race == "with a stop":
            self._start_with_a_stop()
            return
        jobs = [self.start_job] * (2 if race == "with a start" else 1)
        outcomes, new, _ = self._commands(*jobs)
        for outcome in outcomes:
            expect(outcome, type(None), InvalidState, BackendError)
        spawned = outcomes.count(None)
        assert spawned <= 1, "two concurrent starts both succeeded"
        self._spawned_by_command(new, spawned)
        if spawned:
            self._running_again()

    def _start_with_a_stop(self) -> None:
        [started, stopped], new, took_s = self._commands(self.start_job, self.stop_job)
        assert took_s <= LONGEST_GRACE_S + 0.5, f"the stop took {took_s} s (FC-11)"
        expect(started, type(None), InvalidState, BackendError)
        expect(stopped, RunEvidence, InvalidState)
        aborted = isinstance(started, InvalidState) and "aborted by a stop" in str(started)
        self._spawned_by_command(new, 1 if started is None or aborted else 0)
        if started is None:  # the stop came first (and maybe stopped the previous server)
            self._running_again()
        else:
            self._halted()

    @rule(then_s=DURATIONS)
    def stop(self, then_s: float) -> None:
        """Stop (a pending restart included), then let ``then_s`` pass."""
        [outcome], new, took_s = self._commands(self.stop_job)
        expect(outcome, RunEvidence, InvalidState)
        assert took_s <= LONGEST_GRACE_S + 0.5, f"the stop took {took_s} s (FC-11)"
        self._spawned_by_command(new, 0)
        self._halted()
        self.advance_time(then_s)

    @rule()
    def restart(self) -> None:
        restart = partial(self.runtime.restart, self.handle, STOP_GRACE_S)
        [outcome], new, took_s = self._commands(restart)
        assert took_s <= LONGEST_GRACE_S + 0.5, f"the restart took {took_s} s (FC-11)"
        expect(outcome, type(None), InvalidState, BackendError)
        self._spawned_by_command(new, 1 if outcome is None else 0)
        if outcome is None:
            self._running_again()
        else:
            self._halted()

    @rule()
    def reset_restarts(self) -> None:
        async def reset() -> tuple[int, object]:
            mark = len(self.side.events)
            return mark, await outcome_of(lambda: self.runtime.reset_restarts(self.handle))

        mark, outcome = self.side.run(reset)
        assert outcome is None, outcome
        self.ledger.resets.append(mark)

    @rule()
    def status(self) -> None:
        async def look() -> tuple[InstanceStatus, list[int]]:
            status = await self.runtime.status(self.handle)
            return status, [child.pid for child in self.fleet.children]

        status, pids = self.side.run(look)
        assert isinstance(status, InstanceStatus)
        assert status.state is not InstanceState.UNKNOWN, status
        if status.state is InstanceState.LOADED:
            assert not pids, f"Loaded although a server was spawned: {status}"
        if status.state is InstanceState.RUNNING:
            assert pids, f"Running although nothing was spawned: {status}"
            assert status.pid == pids[-1], f"Running, but not our newest server: {status}"

    @rule()
    def deep_health(self) -> None:
        async def probe() -> tuple[object, list[FakeChild]]:
            count, live = len(self.fleet.children), self.fleet.live
            outcome = await outcome_of(lambda: self.runtime.deep_health(self.handle))
            return outcome, [*live, *self.fleet.children[count:]]

        outcome, servers = self.side.run(probe)
        expect(outcome, CompletionResult, BackendError)
        if isinstance(outcome, CompletionResult):
            assert any(not child.hang_completions for child in servers), "a token from nowhere"

    @rule(what=st.sampled_from(["stop", "deep_health"]), patience_s=st.sampled_from([0.1, 1.0]))
    def impatient(self, what: str, patience_s: float) -> None:
        """A caller that gives up waiting (a client's timeout): a stop with the longest grace,
        or a deep health check; the runtime carries the command out all the same."""
        if what == "stop":
            job: Job = partial(self.runtime.stop, self.handle, LONGEST_GRACE_S)
        else:
            job = partial(self.runtime.deep_health, self.handle)

        async def give_up() -> int:
            before = len(self.fleet.children)
            with trio.move_on_after(patience_s):
                await outcome_of(job)
            return len(self.fleet.children) - before

        spawned = self.side.run(give_up)
        if what == "stop":  # delivered before the caller gave up: it stops, and holds
            assert spawned == 0, "a server was spawned during a stop"
            self.ledger.halted_at = self.side.peek(lambda: len(self.fleet.children))

    @rule(seconds=DURATIONS)
    def advance_time(self, seconds: float) -> None:
        self.side.run(partial(trio.sleep, seconds))

    # Faults.

    @rule(ending=ENDINGS, times=st.integers(1, 5), every_s=DURATIONS, then=REACTIONS)
    def crash(
        self, ending: tuple[int | None, int | None], times: int, every_s: float, then: str
    ) -> None:
        """Crash whatever server is live, ``times`` times, ``every_s`` apart (a crash loop);
        right after the last crash, while a restart is pending, the operator acts: ``then``
        names the command, if any."""
        exit_code, signal = ending

        def crash_live(fleet: FakeFleet) -> None:
            for child in fleet.live:
                child.crash(exit_code=exit_code, signal=signal)

        for turn in range(times):
            mark = self.side.peek(lambda: len(self.side.events))
            live = self.side.peek(lambda: bool(self.fleet.live))
            self._fault(crash_live)
            stopping = self.ledger.halted_at is not None  # an impatient caller's stop
            if live and not stopping and self._budget_is_full(mark):
                self._expect_restart_after(mark)
            if turn == times - 1:
                self._react(then)
            self.advance_time(every_s)

    def _react(self, command: str) -> None:
        if command == "stop":
            self.stop(0.0)
        elif command == "start":
            self.start("alone")
        elif command == "restart":
            self.restart()
        elif command == "reset_restarts":
            self.reset_restarts()

    def _budget_is_full(self, mark: int) -> bool:
        """Whether no restart was decided since the last ``reset_restarts`` (or ever)."""
        start = self.ledger.resets[-1] if self.ledger.resets else 0
        events = self.side.peek(lambda: self.side.events[start:mark])
        return not any(isinstance(event, RestartScheduled | GaveUp) for event in events)

    def _expect_restart_after(self, mark: int) -> None:
        events = self.side.peek(lambda: self.side.events[mark:])
        decisions = [event for event in events if isinstance(event, RestartScheduled | GaveUp)]
        assert decisions, "a crash with a full restart budget was not restarted"
        assert isinstance(decisions[0], RestartScheduled), decisions[0]

    @rule(taken=st.booleans())
    def port_taken(self, taken: bool) -> None:
        def change(fleet: FakeFleet) -> int:
            (fleet.occupied.add if taken else fleet.occupied.discard)(PORT)
            return len(fleet.children)

        count = self._fault(change)
        if not taken:
            self.ledger.occupied_at = None
        elif self.ledger.occupied_at is None:
            self.ledger.occupied_at = count

    @rule(fault=FAULTS)
    def fault(self, fault: tuple[str, object]) -> None:
        name, value = fault

        def change(fleet: FakeFleet) -> None:
            setattr(fleet, name, value)  # new servers get it; live ones too, where it applies
            for child in fleet.live if name in ("hang_completions", "ignore_term") else ():
                setattr(child, name, value)

        self._fault(change)

    # Invariants.

    @invariant()
    def at_most_one_live_process(self) -> None:
        live = self.side.peek(lambda: self.fleet.live)
        assert len(live) <= 1, f"two live servers: {live}"
        assert len([child for child in live if child.port == PORT]) <= 1

    @invariant()
    def nothing_spawned_after_an_operator_stop(self) -> None:
        count = self.side.peek(lambda: len(self.fleet.children))
        halted, occupied = self.ledger.halted_at, self.ledger.occupied_at
        assert halted is None or count == halted, "restarted after an operator stop"
        assert occupied is None or count == occupied, "spawned over an occupied port"

    @invariant()
    def restarts_within_the_policy(self) -> None:
        events = self.side.peek(lambda: list(self.side.events))
        check_restart_limits(events, self.ledger.commanded, self.ledger.resets)


@pytest.mark.usefixtures("inline_threads")
def test_one_instance_under_random_commands_and_faults(
    make_config: Callable[[], InferConfig],
) -> None:
    class Machine(OneInstance):
        def __init__(self) -> None:
            super().__init__(make_config())

    run_state_machine_as_test(Machine, settings=SETTINGS)


# Regression tests for the bugs these faults reached: a caller that stops waiting for its
# answer (a timeout, or the supervisor's own restart cancelled by a stop) made the actor's
# answer raise trio.BrokenResourceError, which killed the whole runtime.

Scenario = Callable[[InferRuntime, InstanceHandle], Awaitable[None]]


@attrs.frozen
class SlowSpawns:
    """An `OpenProcess` edge whose spawns take ``delay_s`` seconds (a slow exec)."""

    inner: OpenProcess
    delay_s: float

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None = None,
    ) -> ChildProcess:
        await trio.sleep(self.delay_s)
        return await self.inner(argv, cwd=cwd, env=env, run_as=run_as)


async def runtime_death(config: InferConfig, edges: Edges, scenario: Scenario) -> object:
    """Run ``scenario`` on one loaded instance; what killed the runtime, else None."""
    died: object = None
    try:
        async with open_runtime(config, node_id="bugs", edges=edges) as runtime:
            await scenario(runtime, await runtime.load(SPEC, SUPERVISION))
    except* trio.BrokenResourceError as group:
        died = group
    return died


@pytest.mark.usefixtures("inline_threads")
async def test_a_caller_that_gives_up_on_a_stop_does_not_kill_the_runtime(
    make_config: Callable[[], InferConfig], autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(ignore_term=True)  # the stop takes its whole grace
    seen: list[InstanceStatus] = []

    async def scenario(runtime: InferRuntime, handle: InstanceHandle) -> None:
        await runtime.start(handle)
        with trio.move_on_after(1.0):
            await runtime.stop(handle, 5.0)  # the caller gives up after 1 s of 5
        await trio.sleep(10.0)
        seen.append(await runtime.status(handle))

    died = await runtime_death(make_config(), fleet.edges(), scenario)
    assert died is None, f"the runtime died: {died!r}"
    assert [(s.state, s.stop_reason) for s in seen] == [(InstanceState.EXITED, "requested")]


@pytest.mark.usefixtures("inline_threads")
async def test_a_stop_during_a_restarts_spawn_stops_the_new_server(
    make_config: Callable[[], InferConfig], autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet()
    edges = fleet.edges()
    edges = attrs.evolve(edges, open_process=SlowSpawns(edges.open_process, 1.0))
    answers: list[object] = []

    async def scenario(runtime: InferRuntime, handle: InstanceHandle) -> None:
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        fleet.last.crash(exit_code=1)
        await trio.sleep(POLICY.base_s + 0.5)  # the restart is spawning (1 s)
        answers.append(await outcome_of(lambda: runtime.stop(handle, STOP_GRACE_S)))
        await trio.sleep(30.0)

    died = await runtime_death(make_config(), edges, scenario)
    assert died is None, f"the runtime died: {died!r}"
    [answer] = answers
    assert isinstance(answer, RunEvidence), answer
    assert len(fleet.children) == 2
    assert not fleet.live
