"""A hypothesis state machine drives one supervised instance with random commands and faults.

Issue 3, "Tests": one managed llama.cpp instance runs on a `FakeFleet` (fake processes,
HTTP and net, all inside trio) under ``MockClock(autojump_threshold=0)``. Rules send the
operator's commands (start, stop, restart, reset_restarts, status, deep health, and starts
and stops that race each other), let virtual time pass, and inject faults: crashes (an exit
code or a signal), failing spawns, a foreign program on the port, slow loading, hanging
completions, a server deaf to SIGTERM, and a worker that raises (probe reports raise
ValueError, RecursionError or KeyError: issue 8). After every step the invariants hold:

* never two live processes for the instance; never a spawn while the port is taken;
* no restart after an operator stop, until the next start or restart command;
* supervisor restarts stay inside the policy: at most ``intensity`` within any ``period_s``
  (windows do not span a ``reset_restarts``, which clears the window) and at most
  ``max_restarts`` between two refills (``reset_restarts``, or ``stable_after_s`` of Up);
  every restart follows exactly one `RestartScheduled` decision, and a crash with a full
  budget is always restarted;
* every command is answered, with a value or an `InferactorsError`, within 600 virtual
  seconds (a stop within its grace plus 0.5 s, FC-11); two racing starts spawn at most one
  server; ``status`` never raises and never contradicts the processes (it is Unknown only
  when its own probe met the injected bug, and then says so);
* a worker's exception crashes the instance alone: the event names the injected bug, and a
  server live at the crash is gone within the crash stop's grace (then restarted under the
  policy above, which already counts it).

A state machine is synchronous, so the runtime runs in ``trio.run`` on a thread
(`TrioSide`). Virtual time moves only while a rule runs; between rules the clock is frozen,
and thread hops run inline (`inline_threads`), so every run of an example is the same.
Its trio side and the restart ledger are in ``stateful_support``; the regression tests for
bugs that these faults reached are in ``test_supervision_abandoned_callers.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

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

from actors.stateful_support import (
    PORT,
    STOP_GRACE_S,
    Job,
    Ledger,
    TrioSide,
    check_crashes,
    check_restart_limits,
    concurrently,
    expect,
    outcome_of,
)
from inferactors import (
    BackendError,
    CompletionResult,
    GaveUp,
    InferConfig,
    InstanceState,
    InstanceStatus,
    InvalidState,
    RestartScheduled,
    RunEvidence,
)
from inferactors._actors.instance import CRASH_GRACE_S
from inferactors.testing import FakeChild, FakeFleet

T = TypeVar("T")


LONGEST_GRACE_S = 3.0  # a stop under way for a health kill or an impatient caller: 3 s
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
BUGS = st.sampled_from([ValueError, RecursionError, KeyError])
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


# The state machine.


class OneInstance(RuleBasedStateMachine):
    """One managed instance, its fleet, and what the operator did to it."""

    def __init__(self, config: InferConfig) -> None:
        super().__init__()
        self.side = TrioSide.launch(config)
        self.ledger = Ledger()
        self.raised_before = 0  # bugs met before the last command
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

        self.raised_before = self.side.peek(lambda: len(self.side.bugs.raised))

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
        live, raised = self.side.peek(lambda: (self.fleet.live, len(self.side.bugs.raised)))
        if raised > self.raised_before:  # the new server's first probe met the bug: stopped
            assert len(live) <= 1, f"two live servers: {live}"
        else:
            assert len(live) == 1, f"not running after a start: {live}"

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
        said = {repr(outcome) for outcome in outcomes}  # concurrent starts coalesce (issue 9)
        assert len(said) == 1, f"concurrent starts were answered differently: {said}"
        spawned = 1 if None in outcomes else 0
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
            status = self.runtime.status(self.handle)
            return status, [child.pid for child in self.fleet.children]

        status, pids = self.side.run(look)
        assert isinstance(status, InstanceStatus)
        assert status.state is not InstanceState.UNKNOWN, status  # a board read: no worker
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

    @rule(bug=BUGS, times=st.integers(1, 3), then_s=DURATIONS)
    def worker_raises(self, bug: type[Exception], times: int, then_s: float) -> None:
        """The next ``times`` probe reports raise ``bug`` (a worker bug injected through the
        edges): whichever worker meets it crashes the instance alone; then ``then_s`` pass."""
        self._fault(lambda fleet: self.side.bugs.arm(PORT, lambda: bug("injected"), times))
        self.advance_time(then_s)

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
    def crashes_stay_inside_and_stop_the_server(self) -> None:
        events, now = self.side.peek(lambda: (list(self.side.events), trio.current_time()))
        check_crashes(events, now, CRASH_GRACE_S)

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
