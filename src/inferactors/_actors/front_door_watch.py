"""What the front door actor makes of its members' statuses and measurements (called from
its loop, ``front_door_loop.py``): an instance serving that the scheduler thought down is
resident (``run``, its supervisor or an operator started it); one that exited while
resident is down (a crash, or a stop outside the front door); measured RSS and logged
buffers update its footprint; the machine's memory gives other programs' share."""

from __future__ import annotations

import attrs

from .._errors import RefusalKind
from .._policy import scheduler
from .._policy.residency import foreign_bytes, foreign_in_budget
from .._policy.scheduler_state import Phase, Slot, StartFailure
from .._status import InstanceState, InstanceStatus
from .front_door_msgs import EngineFigure, Loop, Measured, Observed
from .front_door_work import given_up, serving


def apply_observed(door: Loop, message: Observed, now: float) -> None:
    """An instance's status after one of its events. A start we did not make (``run``,
    its supervisor, an operator) is followed here; ours by its worker."""
    slot, status = door.state.slot(message.name), message.status
    theirs = slot.phase is Phase.STARTING and slot.name not in door.starts
    if serving(status):
        if slot.phase is Phase.NOT_LOADED:
            door.step(scheduler.on_running(door.state, slot.name, now))
        elif theirs:
            door.step(scheduler.on_start_done(door.state, slot.name, now))
        return
    if status.state not in (InstanceState.EXITED, InstanceState.UNKNOWN):
        if status.pid is not None and slot.phase is Phase.NOT_LOADED:  # loading already
            door.step(scheduler.on_loading(door.state, slot.name, now))
        return
    down = _down(slot, status)
    if theirs:
        why = f"{slot.name}: {status.diagnosis or status.detail or status.state.value}"
        retry = None if down is not None else door.state.limits.retry_after_s
        failure = StartFailure(RefusalKind.START_FAILED, why, retry)
        door.step(scheduler.on_start_done(door.state, slot.name, now, failure))
        door.step(scheduler.on_stopped(door.state, slot.name, now, down))
        return
    if slot.phase in (Phase.RESIDENT, Phase.DRAINING) and slot.rules.on_demand:
        door.step(scheduler.on_crashed(door.state, slot.name, now))  # no restart behind us
        return
    if slot.phase in (Phase.RESIDENT, Phase.DRAINING) or (
        slot.phase is Phase.NOT_LOADED and down != slot.down and not slot.rules.on_demand
    ):
        door.step(scheduler.on_stopped(door.state, slot.name, now, down))
        door.answer_stoppers(slot.name)


def _down(slot: Slot, status: InstanceStatus) -> str | None:
    """Why an always-on instance will not come back by itself, None when it will (a crash
    its supervisor restarts) or when it runs on demand (a request starts it)."""
    if slot.rules.on_demand:
        return None
    if given_up(status):
        return status.supervision or status.detail or "given up"
    if status.stop_reason == "requested":
        return "stopped by an operator"
    return None


def apply_measured(door: Loop, message: Measured, now: float) -> None:
    """The machine's memory and the held servers' tree RSS. A resident server's figure is
    its peak RSS in this process's life (a loading one is still growing: not taken)."""
    ours = 0
    for name, pid, rss in message.rss:
        if rss is None or pid is None:
            continue
        ours += rss
        slot = door.state.slot(name)
        if slot.phase is not Phase.RESIDENT:
            continue
        same = door.measured_pid.get(name) == pid
        peak = max(rss, slot.footprint.measured_rss or 0) if same else rss
        door.measured_pid[name] = pid
        footprint = attrs.evolve(slot.footprint, measured_rss=peak)
        door.step(scheduler.on_footprint(door.state, name, footprint, now))
    adopted = sum(
        slot.footprint.figure for slot in door.state.slots if slot.rules.adopted and slot.held
    )
    foreign = foreign_bytes(message.machine, ours + adopted)
    budget = door.state.limits.budget.memory
    inside = foreign_in_budget(foreign, message.machine.total, budget)
    if inside != door.state.foreign:
        door.step(scheduler.on_foreign(door.state, inside, now))


def apply_engine(door: Loop, message: EngineFigure, now: float) -> None:
    """The buffers a server process logged while loading."""
    slot = door.state.slot(message.name)
    footprint = attrs.evolve(slot.footprint, engine=message.total)
    door.step(scheduler.on_footprint(door.state, message.name, footprint, now))
