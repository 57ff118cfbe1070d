"""Carrying out the scheduler's effects, for the front door actor (``front_door_loop.py``):
grants and refusals answer the callers, starts and stops become workers
(``front_door_work.py``), and the front door's events are emitted. Synchronous: called
from the actor's loop only."""

from __future__ import annotations

import trio

from .._errors import FrontDoorRefused
from .._events import FootprintDrift, OnDemandStart, QueuedRequestRefused, ResidencyStop
from .._policy.residency_words import cut_words
from .._policy.scheduler import status_of
from .._policy.scheduler_effects import (
    CancelStart,
    Drift,
    Effect,
    Grant,
    Refuse,
    Started,
    StartInstance,
    StopInstance,
)
from .front_door_msgs import Loop
from .front_door_work import start_instance, stop_instance
from .mailbox import scoped
from .messages import Reply, answer, refuse


def carry_out(door: Loop, effect: Effect) -> None:
    """Carry out one effect of the scheduler."""
    now = trio.current_time()
    match effect:
        case Grant():
            _grant(door, effect, now)
        case Started():
            reply = door.replies.pop(effect.request, None)
            if reply is not None:
                answer(reply, None)
        case Refuse():
            _refuse(door, effect, now)
        case StartInstance():
            _start(door, effect, now)
        case StopInstance() | CancelStart():
            _stop(door, effect, now)
        case Drift():
            iid = door.members[effect.name].instance_id
            door.on_event(FootprintDrift(iid, effect.expected, effect.measured, now))


def _grant(door: Loop, effect: Grant, now: float) -> None:
    """Hand the grant over; a caller already gone gives it back at once (never counted)."""
    reply = door.replies.pop(effect.request, None)
    waited = now - door.arrived.pop(effect.request, now)
    upstream = door.members[effect.name].upstream
    taken = False
    if reply is not None:
        with reply:
            try:
                reply.send_nowait(Reply(value=upstream))
                taken = True
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
                pass
    if taken:
        door.observer.granted(effect.name, waited)
    else:
        door.returned(effect.request, served=False)


def _refuse(door: Loop, effect: Refuse, now: float) -> None:
    door.arrived.pop(effect.request, None)
    reply = door.replies.pop(effect.request, None)
    status = status_of(effect.kind, effect.retry_after_s)
    if reply is not None:
        error = FrontDoorRefused(
            effect.message,
            kind=effect.kind,
            status=status,
            model=effect.model,
            retry_after_s=effect.retry_after_s,
        )
        refuse(reply, error)
    slot = door.state.find(effect.model)
    door.observer.refused(None if slot is None else slot.name, effect.kind)
    if slot is not None and effect.waited_s is not None:
        iid = door.members[slot.name].instance_id
        kind = effect.kind.value
        door.on_event(QueuedRequestRefused(iid, kind, effect.message, effect.waited_s, now))


def _start(door: Loop, effect: StartInstance, now: float) -> None:
    member = door.members[effect.name]
    door.on_event(OnDemandStart(member.instance_id, effect.trigger.value, effect.gate, now))
    scope = trio.CancelScope()
    door.starts[effect.name] = scope
    settings = door.settings
    door.box.soon(
        scoped,
        scope,
        start_instance,
        member,
        effect.gate,
        door.gauge,
        settings.recovery_timeout_s,
        settings.limits.retry_after_s,
        door.post,
    )


def _stop(door: Loop, effect: StopInstance | CancelStart, now: float) -> None:
    if isinstance(effect, CancelStart):
        scope = door.starts.pop(effect.name, None)
        if scope is not None:
            scope.cancel()
    member = door.members[effect.name]
    door.last_stop[effect.name] = effect.reason
    words = cut_words(effect.reason, effect.detail)
    for request, role in door.state.serving:  # in flight still: its drain ran out
        if role == effect.name:
            door.cut[request] = words
    door.on_event(ResidencyStop(member.instance_id, effect.reason, effect.detail, now))
    grace = door.settings.stop_grace_s
    door.box.finish(stop_instance, member, effect.reason, grace, door.post)
