"""A hypothesis state machine over the pure front door scheduler, with a model of the
world it acts on (starts and stops that finish later, clients that finish, leave or
never get their answer, time passing). After every step the invariants hold:

- never two starts of one model: a start is asked only of a model that is down;
- never an eviction (or TTL stop) of an instance with requests in flight, and never a
  cancelled start that someone waits for;
- every request gets exactly one answer, and no wait outlives its bound: after a tick at
  ``now`` no waiter whose deadline has passed is left;
- the budget is never exceeded by what the held instances declare;
- an instance's in-flight count is the number of its grants not yet done.
"""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from inferactors._errors import RefusalKind
from inferactors._policy import scheduler, scheduler_stops
from inferactors._policy.scheduler_effects import (
    CancelStart,
    Effect,
    Grant,
    Refuse,
    Started,
    StartInstance,
    Step,
    StopInstance,
)
from inferactors._policy.scheduler_state import Phase, SchedulerState, StartFailure
from inferactors._stop_reasons import StopReason
from policy.scheduler_support import MB, slot, state

BUDGET_MB = 1000
MAX_WAIT_S = 20.0
NAMES = ("a", "b", "c", "big", "pinned")
ASKED = (*NAMES[:-1], "ghost")


def _initial() -> SchedulerState:
    return state(
        slot("a", 300, ttl=15.0),
        slot("b", 400, swap="g", ttl=30.0),
        slot("c", 400, swap="g"),
        slot("big", 900),
        slot("pinned", 200, on_demand=False),
        budget_mb=BUDGET_MB,
        max_wait_s=MAX_WAIT_S,
        drain_timeout_s=5.0,
        max_queue=6,
        max_queue_per_model=3,
    )


@settings(max_examples=150, stateful_step_count=60, deadline=None)
class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = _initial()
        self.now = 0.0
        self.next_request = 1
        self.starting: set[str] = set()  # asked to start, not yet reported
        self.stopping: set[str] = set()  # asked to stop, not yet reported
        self.up: set[str] = set()  # started by us and not stopped since
        self.open_grants: dict[int, str] = {}
        self.waiting: set[int] = set()
        self.answered: set[int] = set()
        self.apply(scheduler.on_running(self.state, "pinned", self.now))

    # Feeding the scheduler, checking each effect against the world before it.

    def apply(self, step: Step) -> None:
        self.state, effects = step
        for effect in effects:
            self.check(effect)

    def check(self, effect: Effect) -> None:
        match effect:
            case StartInstance(name=name):
                assert name not in self.up, f"a second start of {name}"
                self.up.add(name)
                self.starting.add(name)
            case StopInstance(name=name, reason=reason):
                if reason in (StopReason.EVICTED, StopReason.TTL):  # no client of it is open
                    assert name not in self.open_grants.values(), f"{name} stopped while busy"
                self.stopping.add(name)
            case CancelStart(name=name):
                # evicted: nobody waited any more; an operator's stop: it refused them
                waiting = [w for w in self.state.queue if w.name == name]
                assert not waiting, f"{name}'s start cancelled under its waiters"
                self.starting.discard(name)
                self.stopping.add(name)
            case Grant(request=request, name=name):
                self.answer(request)
                self.open_grants[request] = name
            case Refuse(request=request):
                self.answer(request)
            case Started(request=request):
                self.answer(request)

    def answer(self, request: int) -> None:
        assert request not in self.answered, f"request {request} answered twice"
        self.answered.add(request)
        self.waiting.discard(request)

    # Rules.

    @rule(model=st.sampled_from(ASKED))
    def request(self, model: str) -> None:
        request = self.next_request
        self.next_request += 1
        self.waiting.add(request)
        self.apply(scheduler.on_request(self.state, request, model, self.now))

    @precondition(lambda self: self.starting)
    @rule(data=st.data(), ok=st.booleans())
    def start_ends(self, data: st.DataObject, ok: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.starting)))
        self.starting.discard(name)
        failure = None if ok else StartFailure(RefusalKind.START_FAILED, "fake: it died")
        if failure is not None:
            self.up.discard(name)
        self.apply(scheduler.on_start_done(self.state, name, self.now, failure))

    @precondition(lambda self: self.stopping)
    @rule(data=st.data())
    def stop_ends(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.stopping)))
        self.stopping.discard(name)
        self.up.discard(name)
        if self.state.slot(name).phase is Phase.STOPPING:
            self.apply(scheduler.on_stopped(self.state, name, self.now))

    @precondition(lambda self: self.open_grants)
    @rule(data=st.data(), served=st.booleans())
    def client_done(self, data: st.DataObject, served: bool) -> None:
        request = data.draw(st.sampled_from(sorted(self.open_grants)))
        del self.open_grants[request]
        self.apply(scheduler.on_serve_done(self.state, request, self.now, served))

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def client_leaves(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(sorted(self.waiting)))
        self.waiting.discard(request)
        self.answered.add(request)  # nobody may answer it any more
        self.apply(scheduler.on_cancel(self.state, request, self.now))

    @rule(seconds=st.floats(min_value=0.0, max_value=25.0))
    def time_passes(self, seconds: float) -> None:
        # A tick comes at each deadline, as the actor's ticker delivers them.
        self.now = min(self.now + seconds, scheduler_stops.next_deadline(self.state))
        self.apply(scheduler_stops.on_tick(self.state, self.now))

    @rule(name=st.sampled_from(NAMES[:-1]))
    def operator_stops(self, name: str) -> None:
        self.apply(scheduler_stops.on_stop(self.state, name, StopReason.REQUESTED, self.now))

    # Invariants.

    @invariant()
    def budget_holds(self) -> None:
        held = sum(s.footprint.declared for s in self.state.slots if s.held)
        assert held <= BUDGET_MB * MB, f"{held} bytes held over the budget"

    @invariant()
    def no_wait_outlives_its_bound(self) -> None:
        for waiter in self.state.queue:
            assert waiter.deadline > self.now, f"request {waiter.request} waited past its bound"
            assert waiter.deadline - waiter.since == pytest.approx(MAX_WAIT_S)

    @invariant()
    def in_flight_counts_the_open_grants(self) -> None:
        for held in self.state.slots:
            mine = sum(1 for name in self.open_grants.values() if name == held.name)
            assert held.in_flight == mine, f"{held.name}: {held.in_flight} != {mine}"

    @invariant()
    def every_waiting_request_is_queued(self) -> None:
        queued = {waiter.request for waiter in self.state.queue if not waiter.start_only}
        assert queued == self.waiting

    @invariant()
    def phases_match_the_world(self) -> None:
        for name in self.starting:
            assert self.state.slot(name).phase in (Phase.STARTING, Phase.STOPPING)
        for each in self.state.slots:
            if each.phase is Phase.STARTING:
                assert each.name in self.starting


TestScheduler = SchedulerMachine.TestCase


def test_the_machine_starts_from_a_consistent_world() -> None:
    machine = SchedulerMachine()
    assert machine.state.slot("pinned").phase is Phase.RESIDENT
    assert attrs.evolve(machine.state).slots == machine.state.slots
