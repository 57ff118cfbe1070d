"""The front door's scheduling decisions (pure; no I/O, no clock: handlers take ``now``).

llama-swap's split on our layers: every input is a handler ``on_*(state, ..., now)`` that
returns ``(state, effects)`` (`Step`); the front door actor is the one writer of the state
and carries the effects out (``_actors/front_door.py``). Nothing here logs.

**One pass over the queue** (`_pump`) follows every change, oldest waiter first:

1. a waiter for a resident instance that no earlier waiter reserved is granted (so
   requests for a resident model are served together: llama-swap's collation);
2. a waiter for a starting, draining or stopping instance keeps waiting (it joins that
   start; a stopped on-demand instance is started again);
3. the first waiter for an on-demand instance that is not loaded has it admitted
   (``_policy/eviction.py``): fits now, start it; fits after evicting idle residents,
   stop them (its start then waits for their memory to come back); must wait for busy
   residents, reserve them (no new grant until they drain); never fits, refuse every
   waiter for it at once.

What a waiter waits for is claimed: requests behind it are admitted as if that room were
held and those residents gone, so no model starves behind another, and a big model is not
overtaken for ever by small ones. A start is asked only of an instance that is not loaded,
so one model never has two starts.

**Bounds.** Each request waits at most ``max_wait_s`` (`on_tick` refuses it then, 503 with
``Retry-After``); beyond ``max_queue`` waiting requests, or ``max_queue_per_model`` for its
model, a request that cannot be granted at once is refused (503); beyond an instance's
``concurrency_limit`` requests in flight and waiting, 429. A stop drains (no new grant) for
at most ``drain_timeout_s``.

**Idle TTL.** An on-demand instance with nothing in flight and nobody waiting is stopped
``idle_ttl_s`` after its last request ended (or it became resident).

Eviction never stops an instance with requests in flight or a start someone waits for; a
start whose waiters all left is cancelled only when another model needs its room.
"""

from __future__ import annotations

import math

import attrs

from .._errors import RefusalKind
from .._events import StopReason
from .eviction import FitsAfterEvicting, FitsNow, MustWait, NeverFits, admit, claim
from .residency import Bytes, Footprint
from .scheduler_state import (
    CancelStart,
    Drift,
    Effect,
    Grant,
    Phase,
    Refuse,
    SchedulerState,
    Slot,
    Started,
    StartFailure,
    StartInstance,
    Step,
    StopInstance,
    Trigger,
    Waiter,
)

STATUS = {
    RefusalKind.UNKNOWN_MODEL: 404,
    RefusalKind.QUEUE_FULL: 503,
    RefusalKind.WAIT_TIMEOUT: 503,
    RefusalKind.CONCURRENCY_LIMIT: 429,
    RefusalKind.NEVER_FITS: 507,
    RefusalKind.MEMORY_NOT_RECOVERED: 503,
    RefusalKind.START_FAILED: 503,
    RefusalKind.STOPPING: 503,
}
"""The HTTP status of each refusal (a failed start that will not be retried is 502)."""


def status_of(kind: RefusalKind, retry_after_s: float | None) -> int:
    """The HTTP status a client gets for a refusal of ``kind``."""
    if kind is RefusalKind.START_FAILED and retry_after_s is None:
        return 502
    return STATUS[kind]


# Requests.


def on_request(state: SchedulerState, request: int, model: str, now: float) -> Step:
    """A request for ``model`` (a role or an alias) arrives."""
    slot = state.find(model)
    refusal = _refusal_on_arrival(state, slot, request, model)
    if refusal is not None:
        return state, (refusal,)
    assert slot is not None
    tentative, effects = _pump(state.enqueue(request, slot.name, now), now)
    if any(w.request == request for w in tentative.queue) and _over_depth(tentative, slot.name):
        # The pass is pure and the state was already passed: dropping this one leaves
        # nothing undone.
        why, retry = _depth_words(state, slot.name), state.limits.retry_after_s
        return state, (Refuse(request, model, RefusalKind.QUEUE_FULL, why, retry),)
    return tentative, effects


def _refusal_on_arrival(
    state: SchedulerState, slot: Slot | None, request: int, model: str
) -> Refuse | None:
    if slot is None:
        names = ", ".join(s.name for s in state.slots)
        why = f"no model named {model!r} here; the models are: {names}"
        return Refuse(request, model, RefusalKind.UNKNOWN_MODEL, why)
    retry = state.limits.retry_after_s
    if state.closing:
        why = "the front door is shutting down"
        return Refuse(request, model, RefusalKind.STOPPING, why, retry)
    limit = slot.rules.concurrency_limit
    if limit is not None and slot.in_flight + state.queued(slot.name) >= limit:
        why = f"{slot.name!r} has {limit} requests in flight and waiting (its concurrency limit)"
        return Refuse(request, model, RefusalKind.CONCURRENCY_LIMIT, why, retry)
    if slot.down is not None and not slot.rules.on_demand and slot.phase is Phase.NOT_LOADED:
        why = f"{slot.name!r} is not running: {slot.down}"
        return Refuse(request, model, RefusalKind.START_FAILED, why)
    return None


def _over_depth(state: SchedulerState, name: str) -> bool:
    limits = state.limits
    return state.queued() > limits.max_queue or state.queued(name) > limits.max_queue_per_model


def _depth_words(state: SchedulerState, name: str) -> str:
    limits = state.limits
    if state.queued(name) >= limits.max_queue_per_model:
        return f"{limits.max_queue_per_model} requests already wait for {name!r}"
    return f"{limits.max_queue} requests already wait"


def on_start(state: SchedulerState, request: int, name: str, now: float) -> Step:
    """An operator (or the preload list) asks to start the on-demand instance ``name``:
    admitted like a request, answered with `Started` once it is resident (not granted)."""
    return _pump(state.enqueue(request, name, now, start_only=True), now)


def on_cancel(state: SchedulerState, request: int, now: float) -> Step:
    """The caller of ``request`` stopped waiting (its client went away). Only its own wait
    ends; a start only it waited for goes on, and is cancelled if another model needs
    the room."""
    if not any(waiter.request == request for waiter in state.queue):
        return state, ()
    return _pump(_without(state, request), now)


def on_serve_done(state: SchedulerState, request: int, now: float, served: bool = True) -> Step:
    """The grant ``request`` is over (last byte, client gone, upstream failed); a second
    report does nothing. ``served`` False: the caller was gone before it got the grant
    (the instance's idle time is not reset)."""
    name = dict(state.serving).get(request)
    if name is None:
        return state, ()
    serving = tuple(pair for pair in state.serving if pair[0] != request)
    slot = state.slot(name)
    slot = attrs.evolve(
        slot,
        in_flight=max(0, slot.in_flight - 1),
        last_used=now if served else slot.last_used,
    )
    state = attrs.evolve(state.replace(slot), serving=serving)
    effects: tuple[Effect, ...] = ()
    if slot.phase is Phase.DRAINING and slot.in_flight == 0:
        state, effects = _stop(state, slot, slot.stop_reason or StopReason.REQUESTED, "drained")
    state, more = _pump(state, now)
    return state, effects + more


# What the actor reports.


def on_start_done(
    state: SchedulerState, name: str, now: float, failure: StartFailure | None = None
) -> Step:
    """The start of ``name`` ended: Running (``failure`` None), or failed; its waiters are
    then refused with the failure. A start that was cancelled meanwhile is ignored (its
    stop reports `on_stopped`)."""
    slot = state.slot(name)
    if slot.phase is not Phase.STARTING:
        return state, ()
    if failure is None:
        return _pump(state.resident(slot, now), now)
    state = state.replace(attrs.evolve(slot, phase=Phase.NOT_LOADED, gated=False))
    state, refusals = _refuse_waiters(
        state, name, now, failure.kind, failure.message, failure.retry_after_s
    )
    state, more = _pump(state, now)
    return state, refusals + more


def on_stopped(state: SchedulerState, name: str, now: float, down: str | None = None) -> Step:
    """``name``'s server is no longer running (our stop ended, it crashed, or an operator
    stopped it outside the front door). ``down``: why an always-on instance will not come
    back by itself (its waiters are refused). Ignored while our own start is under way:
    the start reports its failure."""
    slot = state.slot(name)
    if slot.phase is Phase.STARTING:
        return state, ()
    slot = attrs.evolve(slot, phase=Phase.NOT_LOADED, stop_reason=None, drain_until=None, down=down)
    state = state.replace(slot)
    refusals: tuple[Effect, ...] = ()
    if down is not None and not slot.rules.on_demand:
        why = f"{name!r} is not running: {down}"
        state, refusals = _refuse_waiters(state, name, now, RefusalKind.START_FAILED, why, None)
    state, more = _pump(state, now)
    return state, refusals + more


def on_running(state: SchedulerState, name: str, now: float) -> Step:
    """``name`` is Running though we did not start it (``run`` started an always-on
    instance, the supervisor restarted it, an operator started it): it is resident."""
    slot = state.slot(name)
    if slot.phase is not Phase.NOT_LOADED:
        return state, ()
    return _pump(state.resident(slot, now), now)


def on_footprint(state: SchedulerState, name: str, footprint: Footprint, now: float) -> Step:
    """New figures for ``name`` (a measurement, the engine's buffer lines); a first drift
    past the threshold is reported (`Drift`)."""
    slot = state.slot(name)
    effects: tuple[Effect, ...] = ()
    if footprint.drifted() and not slot.footprint.drifted():
        measured = footprint.measured
        assert measured is not None
        effects = (Drift(name, footprint.expected, measured),)
    state, more = _pump(state.replace(attrs.evolve(slot, footprint=footprint)), now)
    return state, effects + more


def on_foreign(state: SchedulerState, foreign: int, now: float) -> Step:
    """Other programs now hold ``foreign`` bytes inside the budget."""
    return _pump(attrs.evolve(state, foreign=max(0, foreign)), now)


def on_stop(state: SchedulerState, name: str, reason: StopReason, now: float) -> Step:
    """Stop ``name`` for ``reason`` (an operator, a reload): its waiters are refused, its
    requests in flight drain (bounded), then it stops. Adopted servers are never stopped."""
    slot = state.slot(name)
    if slot.rules.adopted or slot.phase in (Phase.NOT_LOADED, Phase.STOPPING):
        return state, ()
    words = f"{name!r} is being stopped ({reason.value})"
    retry = state.limits.retry_after_s
    state, refusals = _refuse_waiters(state, name, now, RefusalKind.STOPPING, words, retry)
    state, effects = _begin_stop(state, state.slot(name), reason, now, "")
    state, more = _pump(state, now)
    return state, refusals + effects + more


def on_shutdown(state: SchedulerState, now: float) -> Step:
    """The front door closes: every waiter is refused, later requests too, and every
    instance we may stop drains (bounded) and stops (reason ``shutdown``)."""
    state = attrs.evolve(state, closing=True)
    effects: tuple[Effect, ...] = ()
    retry = state.limits.retry_after_s
    for waiter in state.queue:
        effects += (_refuse(waiter, now, RefusalKind.STOPPING, "shutting down", retry),)
    state = attrs.evolve(state, queue=())
    for slot in state.slots:
        if slot.rules.adopted or slot.phase in (Phase.NOT_LOADED, Phase.STOPPING):
            continue
        state, more = _begin_stop(state, slot, StopReason.SHUTDOWN, now, "")
        effects += more
    return state, effects


def on_tick(state: SchedulerState, now: float) -> Step:
    """Time passed: waiters past their deadline are refused, drains past theirs stop,
    idle on-demand instances past their TTL stop (reason ``ttl``)."""
    effects: tuple[Effect, ...] = ()
    for waiter in state.queue:
        if now >= waiter.deadline:
            state = _without(state, waiter.request)
            effects += (_timed_out(state, waiter, now),)
    for slot in state.slots:
        if slot.phase is Phase.DRAINING and now >= (slot.drain_until or math.inf):
            reason = slot.stop_reason or StopReason.REQUESTED
            state, more = _stop(state, slot, reason, "drain timed out")
            effects += more
        elif _idle_expired(state, slot, now):
            idle = now - slot.last_used
            state, more = _stop(state, slot, StopReason.TTL, f"idle for {idle:.0f} s")
            effects += more
    state, more = _pump(state, now)
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
    return _refuse(waiter, now, RefusalKind.WAIT_TIMEOUT, words, state.limits.retry_after_s)


# Stopping.


def _begin_stop(
    state: SchedulerState, slot: Slot, reason: StopReason, now: float, detail: str
) -> Step:
    """Drain ``slot`` (stop it at once when nothing is in flight; cancel a start)."""
    if slot.phase is Phase.STARTING:
        stopping = attrs.evolve(slot, phase=Phase.STOPPING, stop_reason=reason)
        return state.replace(stopping), (CancelStart(slot.name, reason, detail),)
    if slot.in_flight == 0:
        return _stop(state, slot, reason, detail)
    until = now + state.limits.drain_timeout_s
    draining = attrs.evolve(slot, phase=Phase.DRAINING, stop_reason=reason, drain_until=until)
    return state.replace(draining), ()


def _stop(state: SchedulerState, slot: Slot, reason: StopReason, detail: str) -> Step:
    stopping = attrs.evolve(slot, phase=Phase.STOPPING, stop_reason=reason, drain_until=None)
    return state.replace(stopping), (StopInstance(slot.name, reason, detail),)


# Refusing.


def _refuse(
    waiter: Waiter, now: float, kind: RefusalKind, message: str, retry: float | None
) -> Refuse:
    return Refuse(waiter.request, waiter.name, kind, message, retry, now - waiter.since)


def _refuse_waiters(
    state: SchedulerState,
    name: str,
    now: float,
    kind: RefusalKind,
    message: str,
    retry: float | None,
) -> Step:
    refusals = tuple(_refuse(w, now, kind, message, retry) for w in state.waiting_for(name))
    queue = tuple(waiter for waiter in state.queue if waiter.name != name)
    return attrs.evolve(state, queue=queue), refusals


def _without(state: SchedulerState, request: int) -> SchedulerState:
    return attrs.evolve(state, queue=tuple(w for w in state.queue if w.request != request))


# The pass over the queue.


@attrs.define
class _Pass:
    """What one pass has decided so far (module docstring)."""

    state: SchedulerState
    now: float
    claimed: Bytes = Bytes()  # noqa: RUF009  (frozen value)
    reserved: set[str] = attrs.Factory(set)
    admitted: set[str] = attrs.Factory(set)
    never: dict[str, str] = attrs.Factory(dict)
    keep: list[Waiter] = attrs.Factory(list)
    effects: list[Effect] = attrs.Factory(list)


def _pump(state: SchedulerState, now: float) -> Step:
    run = _Pass(state, now)
    for waiter in state.queue:
        _visit(run, waiter)
    final = attrs.evolve(run.state, queue=tuple(run.keep))
    return final, tuple(run.effects)


def _visit(run: _Pass, waiter: Waiter) -> None:
    never = run.never.get(waiter.name)
    if never is not None:  # a model this pass found never fits: its later waiters too
        run.effects.append(_refuse(waiter, run.now, RefusalKind.NEVER_FITS, never, None))
        return
    slot = run.state.slot(waiter.name)
    joined = waiter.ticket < slot.joined_before
    if slot.phase is Phase.RESIDENT and (joined or slot.name not in run.reserved):
        _grant(run, waiter, slot)
        return
    if slot.phase is Phase.NOT_LOADED and slot.rules.on_demand and slot.name not in run.admitted:
        run.admitted.add(slot.name)
        if not _admit(run, waiter, slot):
            return
    run.keep.append(waiter)


def _grant(run: _Pass, waiter: Waiter, slot: Slot) -> None:
    if waiter.start_only:
        run.effects.append(Started(waiter.request, slot.name))
        return
    busier = attrs.evolve(slot, in_flight=slot.in_flight + 1)
    serving = (*run.state.serving, (waiter.request, slot.name))
    run.state = attrs.evolve(run.state.replace(busier), serving=serving)
    run.effects.append(Grant(waiter.request, slot.name))


def _admit(run: _Pass, waiter: Waiter, slot: Slot) -> bool:
    """Admit ``slot`` for ``waiter``; False when the waiter was refused (never fits)."""
    state = run.state
    holders = state.holders()
    target = slot.target()
    frozen = frozenset(run.reserved)
    admission = admit(target, holders, state.limits.budget, state.foreign, run.claimed, frozen)
    match admission:
        case NeverFits(why=why):
            run.never[slot.name] = why
            run.effects.append(_refuse(waiter, run.now, RefusalKind.NEVER_FITS, why, None))
            return False
        case FitsNow():
            trigger = Trigger.OPERATOR if waiter.start_only else Trigger.REQUEST
            gate = target.need.memory if slot.gated else None
            starting = attrs.evolve(slot, phase=Phase.STARTING, gated=False)
            run.state = state.replace(starting)
            run.effects.append(StartInstance(slot.name, trigger, gate))
            return True
        case FitsAfterEvicting(victims=victims):
            run.state = state.replace(attrs.evolve(slot, gated=True))
            run.reserved.update(victims)
            for victim in victims:
                _evict(run, run.state.slot(victim), slot.name)
        case MustWait(victims=victims, stopping=stopping):
            run.reserved.update(victims + stopping)
            if victims or stopping:
                run.state = state.replace(attrs.evolve(slot, gated=True))
    run.claimed = run.claimed + claim(target.need, admission, holders)
    return True


def _evict(run: _Pass, victim: Slot, for_name: str) -> None:
    detail = f"to make room for {for_name!r}"
    if victim.phase is Phase.STARTING:
        stopping = attrs.evolve(victim, phase=Phase.STOPPING, stop_reason=StopReason.EVICTED)
        run.state = run.state.replace(stopping)
        run.effects.append(CancelStart(victim.name, StopReason.EVICTED, detail))
        return
    run.state, effects = _stop(run.state, victim, StopReason.EVICTED, detail)
    run.effects.extend(effects)
