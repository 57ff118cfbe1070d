"""One pass over the front door's queue, oldest waiter first (pure; ``_policy/scheduler.py``
describes the rules), and the small steps every handler shares: stopping an instance,
refusing a waiter, dropping one from the queue."""

from __future__ import annotations

import attrs

from .._errors import RefusalKind
from .._stop_reasons import StopReason
from .eviction import FitsAfterEvicting, FitsNow, MustWait, NeverFits, admit, claim
from .residency import Bytes
from .scheduler_effects import (
    CancelStart,
    Effect,
    Grant,
    Refuse,
    Started,
    StartInstance,
    Step,
    StopInstance,
    Trigger,
)
from .scheduler_state import Phase, SchedulerState, Slot, Waiter


def stop_now(state: SchedulerState, slot: Slot, reason: StopReason, detail: str) -> Step:
    stopping = attrs.evolve(slot, phase=Phase.STOPPING, stop_reason=reason, drain_until=None)
    return state.with_slot(stopping), (StopInstance(slot.name, reason, detail),)


def refusal(
    waiter: Waiter, now: float, kind: RefusalKind, message: str, retry: float | None
) -> Refuse:
    return Refuse(waiter.request, waiter.name, kind, message, retry, now - waiter.since)


def refuse_waiters(
    state: SchedulerState,
    name: str,
    now: float,
    kind: RefusalKind,
    message: str,
    retry: float | None,
) -> Step:
    refusals = tuple(refusal(w, now, kind, message, retry) for w in state.waiting_for(name))
    queue = tuple(waiter for waiter in state.queue if waiter.name != name)
    return attrs.evolve(state, queue=queue), refusals


def without(state: SchedulerState, request: int) -> SchedulerState:
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


def pump(state: SchedulerState, now: float) -> Step:
    run = _Pass(state, now)
    for waiter in state.queue:
        _visit(run, waiter)
    final = attrs.evolve(run.state, queue=tuple(run.keep))
    return final, tuple(run.effects)


def _visit(run: _Pass, waiter: Waiter) -> None:
    never = run.never.get(waiter.name)
    if never is not None:  # a model this pass found never fits: its later waiters too
        run.effects.append(refusal(waiter, run.now, RefusalKind.NEVER_FITS, never, None))
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
    run.state = attrs.evolve(run.state.with_slot(busier), serving=serving)
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
            run.effects.append(refusal(waiter, run.now, RefusalKind.NEVER_FITS, why, None))
            return False
        case FitsNow():
            trigger = Trigger.OPERATOR if waiter.start_only else Trigger.REQUEST
            gate = target.need.memory if slot.gated else None
            starting = attrs.evolve(slot, phase=Phase.STARTING, gated=False)
            run.state = state.with_slot(starting)
            run.effects.append(StartInstance(slot.name, trigger, gate))
            return True
        case FitsAfterEvicting(victims=victims):
            run.state = state.with_slot(attrs.evolve(slot, gated=True))
            run.reserved.update(victims)
            for victim in victims:
                _evict(run, run.state.slot(victim), slot.name)
        case MustWait(victims=victims, stopping=stopping):
            run.reserved.update(victims + stopping)
            if victims or stopping:
                run.state = state.with_slot(attrs.evolve(slot, gated=True))
    run.claimed = run.claimed + claim(target.need, admission, holders)
    return True


def _evict(run: _Pass, victim: Slot, for_name: str) -> None:
    detail = f"to make room for {for_name!r}"
    if victim.phase is Phase.STARTING:
        stopping = attrs.evolve(victim, phase=Phase.STOPPING, stop_reason=StopReason.EVICTED)
        run.state = run.state.with_slot(stopping)
        run.effects.append(CancelStart(victim.name, StopReason.EVICTED, detail))
        return
    run.state, effects = stop_now(run.state, victim, StopReason.EVICTED, detail)
    run.effects.extend(effects)
