"""Stops and deadlines of the front door scheduler (pure; ``_policy/scheduler.py``
describes the rules): an operator's or a reload's stop and the shutdown drain their
instances (bounded) before stopping them; a tick refuses waits past their bound, stops
drains past theirs and idle on-demand instances past their TTL."""

from __future__ import annotations

import math

import attrs

from .._errors import RefusalKind
from .._stop_reasons import StopReason
from .scheduler_effects import CancelStart, Effect, Refuse, Step
from .scheduler_pass import pump, refusal, refuse_waiters, stop_now, without
from .scheduler_state import Phase, SchedulerState, Slot, Waiter


def on_stop(state: SchedulerState, name: str, reason: StopReason, now: float) -> Step:
    """Stop ``name`` for ``reason`` (an operator, a reload): its waiters are refused, its
    requests in flight drain (bounded), then it stops. Adopted servers are never stopped."""
    slot = state.slot(name)
    if slot.rules.adopted or slot.phase in (Phase.NOT_LOADED, Phase.STOPPING):
        return state, ()
    words = f"{name!r} is being stopped ({reason.value})"
    retry = state.limits.retry_after_s
    state, refusals = refuse_waiters(state, name, now, RefusalKind.STOPPING, words, retry)
    state, effects = begin_stop(state, state.slot(name), reason, now, "")
    state, more = pump(state, now)
    return state, refusals + effects + more


def on_shutdown(state: SchedulerState, now: float) -> Step:
    """The front door closes: every waiter is refused, later requests too, and every
    instance we may stop drains (bounded) and stops (reason ``shutdown``)."""
    state = attrs.evolve(state, closing=True)
    effects: tuple[Effect, ...] = ()
    retry = state.limits.retry_after_s
    for waiter in state.queue:
        effects += (refusal(waiter, now, RefusalKind.STOPPING, "shutting down", retry),)
    state = attrs.evolve(state, queue=())
    for slot in state.slots:
        if slot.rules.adopted or slot.phase in (Phase.NOT_LOADED, Phase.STOPPING):
            continue
        state, more = begin_stop(state, slot, StopReason.SHUTDOWN, now, "")
        effects += more
    return state, effects


def on_tick(state: SchedulerState, now: float) -> Step:
    """Time passed: waiters past their deadline are refused, drains past theirs stop,
    idle on-demand instances past their TTL stop (reason ``ttl``)."""
    effects: tuple[Effect, ...] = ()
    for waiter in state.queue:
        if now >= waiter.deadline:
            state = without(state, waiter.request)
            effects += (_timed_out(state, waiter, now),)
    for slot in state.slots:
        if slot.phase is Phase.DRAINING and now >= (slot.drain_until or math.inf):
            reason = slot.stop_reason or StopReason.REQUESTED
            state, more = stop_now(state, slot, reason, "drain timed out")
            effects += more
        elif _idle_expired(state, slot, now):
            idle = now - slot.last_used
            state, more = stop_now(state, slot, StopReason.TTL, f"idle for {idle:.0f} s")
            effects += more
    state, more = pump(state, now)
    return state, effects + more


def next_deadline(state: SchedulerState) -> float:
    """When `on_tick` next has something to do (``inf``: nothing)."""
    times = [waiter.deadline for waiter in state.queue]
    times += [s.drain_until for s in state.slots if s.drain_until is not None]
    times += [_expiry(state, slot) for slot in state.slots]
    return min(times, default=math.inf)


def ttl_left(state: SchedulerState, name: str, now: float) -> float | None:
    """Seconds before ``name`` idles out, None when it is not counting down (not resident,
    busy, waited for, always on, or a TTL of inf)."""
    expiry = _expiry(state, state.slot(name))
    return None if math.isinf(expiry) else max(0.0, expiry - now)


def _expiry(state: SchedulerState, slot: Slot) -> float:
    rules = slot.rules
    if (
        slot.phase is not Phase.RESIDENT
        or not rules.on_demand
        or rules.adopted
        or slot.in_flight
        or any(True for _ in state.waiting_for(slot.name))
    ):
        return math.inf
    return slot.last_used + rules.idle_ttl_s


def _idle_expired(state: SchedulerState, slot: Slot, now: float) -> bool:
    return now >= _expiry(state, slot)


def _timed_out(state: SchedulerState, waiter: Waiter, now: float) -> Refuse:
    slot = state.slot(waiter.name)
    what = {
        Phase.NOT_LOADED: "waiting for room",
        Phase.STARTING: "its start is still under way",
        Phase.RESIDENT: "it is reserved for a request ahead",
        Phase.DRAINING: "it is draining",
        Phase.STOPPING: "it is stopping",
    }[slot.phase]
    words = f"waited {now - waiter.since:.1f} s for {waiter.name!r} ({what})"
    return refusal(waiter, now, RefusalKind.WAIT_TIMEOUT, words, state.limits.retry_after_s)


def begin_stop(
    state: SchedulerState, slot: Slot, reason: StopReason, now: float, detail: str
) -> Step:
    """Drain ``slot`` (stop it at once when nothing is in flight; cancel a start)."""
    if slot.phase is Phase.STARTING:
        stopping = attrs.evolve(slot, phase=Phase.STOPPING, stop_reason=reason)
        return state.with_slot(stopping), (CancelStart(slot.name, reason, detail),)
    if slot.in_flight == 0:
        return stop_now(state, slot, reason, detail)
    until = now + state.limits.drain_timeout_s
    draining = attrs.evolve(slot, phase=Phase.DRAINING, stop_reason=reason, drain_until=until)
    return state.with_slot(draining), ()
