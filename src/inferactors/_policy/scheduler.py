"""The front door's scheduling decisions (pure; no I/O, no clock: handlers take ``now``).

llama-swap's split on our layers: every input is a handler ``on_*(state, ..., now)`` that
returns ``(state, effects)`` (`Step`); the front door actor is the one writer of the state
and carries the effects out (``_actors/front_door_scheduler.py``). Nothing here logs.

The request handlers and the instance's reports are here; one pass over the queue is
``scheduler_pass.py``; stops and deadlines (an operator's stop, shutdown, ticks, TTL) are
``scheduler_stops.py``; the state ``scheduler_state.py``, the effects
``scheduler_effects.py``.

**One pass over the queue** (`scheduler_pass.pump`) follows every change, oldest waiter
first:

1. a waiter for a resident instance is granted, unless a waiter ahead of it reserved that
   instance for eviction and it came after the instance became resident: every waiter
   that joined a start is served by it (llama-swap's collation), later ones wait their
   turn;
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

**Bounds.** Each request waits at most ``max_wait_s`` (a tick refuses it then, 503 with
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

import attrs

from .._errors import RefusalKind
from .._stop_reasons import StopReason
from .model_routes import unknown_words
from .residency import Footprint
from .scheduler_effects import Drift, Effect, Refuse, Step
from .scheduler_pass import pump, refusal, refuse_waiters, stop_now, without
from .scheduler_state import Limits, Phase, SchedulerState, Slot, StartFailure

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


_REFUSING_STOPS = frozenset({StopReason.REQUESTED, StopReason.RELOAD, StopReason.SHUTDOWN})
"""Stops during which a new request is refused (an operator wants it down; a reload
loads it anew): during a TTL stop or an eviction it waits and starts the model again."""


def status_of(kind: RefusalKind, retry_after_s: float | None) -> int:
    """The HTTP status a client gets for a refusal of ``kind``."""
    if kind is RefusalKind.START_FAILED and retry_after_s is None:
        return 502
    return STATUS[kind]


# Requests.


def on_request(
    state: SchedulerState, request: int, model: str, now: float, since: float | None = None
) -> Step:
    """A request for ``model`` (a role or an alias) arrives; ``since``: when it arrived at
    the front door, if it waited before it came here (its ``max_wait_s`` counts from then)."""
    slot = state.find(model)
    refusal = _refusal_on_arrival(state, slot, request, model)
    if refusal is not None:
        return state, (refusal,)
    assert slot is not None
    tentative, effects = pump(state.enqueue(request, slot.name, now, since=since), now)
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
        why = unknown_words(model, (s.name for s in state.slots))
        return Refuse(request, model, RefusalKind.UNKNOWN_MODEL, why)
    retry = state.limits.retry_after_s
    if state.closing:
        why = "the front door is shutting down"
        return Refuse(request, model, RefusalKind.STOPPING, why, retry)
    if slot.phase in (Phase.DRAINING, Phase.STOPPING) and slot.stop_reason in _REFUSING_STOPS:
        why = f"{slot.name!r} is being stopped ({slot.stop_reason.value})"
        return Refuse(request, model, RefusalKind.STOPPING, why, retry)
    limit = slot.rules.concurrency_limit
    if limit is not None and slot.in_flight + state.queued(slot.name) >= limit:
        why = f"{slot.name!r} has {limit} requests in flight and waiting (its concurrency limit)"
        return Refuse(request, model, RefusalKind.CONCURRENCY_LIMIT, why, retry)
    down = slot.down_words()
    if down is not None and slot.phase is Phase.NOT_LOADED:
        why = f"{slot.name!r} is not running: {down}"
        if slot.operator_stopped:  # no request starts it again
            why += f"; an operator's start (inferactors start {slot.name}) serves it again"
            return Refuse(request, model, RefusalKind.STOPPING, why)
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
    admitted like a request, answered with `Started` once it is resident (not granted).
    It ends an operator's stop: requests start it again from then."""
    slot = state.slot(name)
    if slot.operator_stopped:
        state = state.with_slot(attrs.evolve(slot, operator_stopped=False))
    return pump(state.enqueue(request, name, now, start_only=True), now)


def on_crashed(state: SchedulerState, name: str, now: float) -> Step:
    """``name``'s server exited on its own (a crash) while resident or draining. An
    always-on instance is left to its supervisor (`on_stopped`). An on-demand one is
    stopped (reason ``crash``), which cancels its supervisor's pending restart: a restart
    behind the ledger's back could take room the ledger gave to another model. It is then
    not loaded, and the next request starts it through admission like a cold start."""
    slot = state.slot(name)
    if not slot.rules.on_demand or slot.phase not in (Phase.RESIDENT, Phase.DRAINING):
        return on_stopped(state, name, now)
    reason = slot.stop_reason if slot.phase is Phase.DRAINING else None
    detail = "it exited on its own: not restarted behind the ledger; a request starts it"
    state, effects = stop_now(state, slot, reason or StopReason.CRASH, detail)
    state, more = pump(state, now)
    return state, effects + more


def on_cancel(state: SchedulerState, request: int, now: float) -> Step:
    """The caller of ``request`` stopped waiting (its client went away). Only its own wait
    ends; a start only it waited for goes on, and is cancelled if another model needs
    the room."""
    if not any(waiter.request == request for waiter in state.queue):
        return state, ()
    return pump(without(state, request), now)


def on_serve_done(state: SchedulerState, request: int, now: float, served: bool = True) -> Step:
    """The grant ``request`` is over (last byte, client gone, upstream failed); a second
    report does nothing. ``served`` False: the caller was gone before it got the grant
    (the instance's idle time is not reset)."""
    name = dict(state.serving).get(request)
    if name is None:
        return state, ()
    serving = tuple(pair for pair in state.serving if pair[0] != request)
    if state.find(name) is None:  # its instance left the run file meanwhile
        return attrs.evolve(state, serving=serving), ()
    slot = state.slot(name)
    slot = attrs.evolve(
        slot,
        in_flight=max(0, slot.in_flight - 1),
        last_used=now if served else slot.last_used,
    )
    state = attrs.evolve(state.with_slot(slot), serving=serving)
    effects: tuple[Effect, ...] = ()
    if slot.phase is Phase.DRAINING and slot.in_flight == 0:
        state, effects = stop_now(state, slot, slot.stop_reason or StopReason.REQUESTED, "drained")
    state, more = pump(state, now)
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
        return pump(state.resident(slot, now), now)
    state = state.with_slot(attrs.evolve(slot, phase=Phase.NOT_LOADED, gated=False))
    state, refusals = refuse_waiters(
        state, name, now, failure.kind, failure.message, failure.retry_after_s
    )
    state, more = pump(state, now)
    return state, refusals + more


def on_stopped(state: SchedulerState, name: str, now: float, down: str | None = None) -> Step:
    """``name``'s server is no longer running (our stop ended, it crashed, or an operator
    stopped it outside the front door). ``down``: why an always-on instance will not come
    back by itself (its waiters are refused). Ignored while our own start is under way:
    the start reports its failure."""
    slot = state.slot(name)
    if slot.phase is Phase.STARTING:
        return state, ()
    # an operator's stop of an on-demand instance lasts until an operator's start
    operator = slot.rules.on_demand and slot.stop_reason is StopReason.REQUESTED
    slot = attrs.evolve(
        slot,
        phase=Phase.NOT_LOADED,
        stop_reason=None,
        drain_until=None,
        down=down,
        operator_stopped=operator and down is None,
    )
    state = state.with_slot(slot)
    refusals: tuple[Effect, ...] = ()
    if down is not None and not slot.rules.on_demand:
        why = f"{name!r} is not running: {down}"
        state, refusals = refuse_waiters(state, name, now, RefusalKind.START_FAILED, why, None)
    state, more = pump(state, now)
    return state, refusals + more


def on_running(state: SchedulerState, name: str, now: float) -> Step:
    """``name`` is Running though we did not start it (``run`` started an always-on
    instance, the supervisor restarted it, an operator started it): it is resident."""
    slot = state.slot(name)
    if slot.phase is not Phase.NOT_LOADED:
        return state, ()
    return pump(state.resident(slot, now), now)


def on_loading(state: SchedulerState, name: str, now: float) -> Step:
    """``name``'s server runs but does not serve yet, and we did not start it (``run``, its
    supervisor or an operator did): it holds its memory already, so it counts as starting
    (requests for it wait; `on_start_done` follows once it serves or fails)."""
    slot = state.slot(name)
    if slot.phase is not Phase.NOT_LOADED:
        return state, ()
    started = attrs.evolve(slot, phase=Phase.STARTING, down=None, operator_stopped=False)
    return pump(state.with_slot(started), now)


def on_footprint(state: SchedulerState, name: str, footprint: Footprint, now: float) -> Step:
    """New figures for ``name`` (a measurement, the engine's buffer lines); a first drift
    past the threshold is reported (`Drift`)."""
    slot = state.slot(name)
    effects: tuple[Effect, ...] = ()
    if footprint.drifted() and not slot.footprint.drifted():
        measured = footprint.measured
        assert measured is not None
        effects = (Drift(name, footprint.expected, measured),)
    state, more = pump(state.with_slot(attrs.evolve(slot, footprint=footprint)), now)
    return state, effects + more


def on_foreign(state: SchedulerState, foreign: int, now: float) -> Step:
    """Other programs now hold ``foreign`` bytes inside the budget."""
    return pump(attrs.evolve(state, foreign=max(0, foreign)), now)


def on_rebind(state: SchedulerState, slots: tuple[Slot, ...], limits: Limits, now: float) -> Step:
    """A reload changed the instances: ``slots`` (in the new order; a kept instance's
    slot carries its phase and counts) and ``limits`` replace the old ones. Waiters for a
    model that is gone are refused (404)."""
    names = {slot.name for slot in slots}
    refusals: tuple[Effect, ...] = ()
    for waiter in state.queue:
        if waiter.name not in names:
            why = f"{waiter.name!r} was removed from the run file"
            refusals += (refusal(waiter, now, RefusalKind.UNKNOWN_MODEL, why, None),)
    queue = tuple(waiter for waiter in state.queue if waiter.name in names)
    state = attrs.evolve(state, slots=slots, limits=limits, queue=queue)
    state, evictions = _fit_budget(state)
    state, more = pump(state, now)
    return state, refusals + evictions + more


def _fit_budget(state: SchedulerState) -> Step:
    """A smaller budget is applied at once: idle on-demand residents that no request waits
    for are stopped (reason ``evicted``), least recently used first, until what is held
    fits. Busy, starting, always-on and adopted instances are never stopped for it; they
    count until they stop by themselves, and nothing new starts until there is room."""
    budget = state.limits.budget
    effects: tuple[Effect, ...] = ()
    waited = {waiter.name for waiter in state.queue}
    idle = sorted(
        (
            slot
            for slot in state.slots
            if slot.phase is Phase.RESIDENT
            and slot.pin() is None
            and slot.in_flight == 0
            and slot.name not in waited
        ),
        key=lambda slot: slot.last_used,
    )
    held = state.held()
    for slot in idle:
        if held.fits(budget):
            break
        held = (held - slot.footprint.need()).clipped()
        state, more = stop_now(state, slot, StopReason.EVICTED, "the reloaded budget is smaller")
        effects += more
    return state, effects
