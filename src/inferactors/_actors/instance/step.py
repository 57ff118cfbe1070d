"""Every decision of the instance actor: ``step(state, message, now, seen)`` (pure; no
trio, no I/O), and the rules of its commands, of its process's life and of a crash.

The actor (``actor.py``) takes one message at a time, calls `step`, keeps the new `State`
and carries out the `Effect` values in order (llama-swap's router: its scheduler returns,
the run loop acts). Nothing else writes the state, and nothing here waits or signals.

A message is a command (``_actors/messages.py``: start, stop, restart, status, health,
deep health, annotate, shutdown), a worker's result (``messages.py``) or `Crashed`. What
the rules need of the live world (does the process still run, did a caller give up) the
actor reads as it takes the message and hands over as `Seen` (``messages.py``). What the
watching tasks report (a probe, the readiness deadline, the watchdog, an exposure, a
changed model file) is judged by ``verdicts.py``; every stop goes through
`stopping.stop_process`.

The rules, in the order they win:

* A closing (unloading) instance refuses every command; results are still applied.
* Start: an adopted server is only checked; an exposure stop holds until reload;
  concurrent starts coalesce (every caller gets the one outcome); one process at a time;
  a start whose caller gave up before it was read spawns nothing; a supervisor's restart
  of an instance the operator stopped is refused.
* Stop: never of an adopted server; a stop while starting waits for the spawn and then
  stops it; the first stop of a process sets its reason, later ones only wait for it (a
  stop's reason is kept: an operator stop is never turned into a crash, nor undone).
* Spawned: the callers get the one outcome. Aborted, when stops came meanwhile, when every
  caller gave up (stopped at once, reason ``requested``, not counted) or when the actor
  crashed meanwhile (stopped, reason ``error``).
* Exited/Stopped: counted once per process, with the pending stop's reason, else a crash
  (or a start-up failure, when its output says why).
* A probe's report: see `verdicts.judge_report`, one rule per comment, in order.
* Holds: see ``verdicts.py`` (exposure, a changed model file, a start-up fault, the
  readiness deadline, the watchdog, a long unhealthy spell).
* Crashed: a managed server is stopped with reason ``error`` (restarted by the supervisor
  under its policy); a start under way is aborted once spawned; a stop under way keeps its
  reason; an adopted server is only marked.
"""

from __future__ import annotations

from typing import assert_never

import attrs

from ..._edges.capture import RunEvidence
from ..._edges.process import ManagedProcess
from ..._errors import InvalidState, UnknownInstance, Unsupported
from ..._events import ModelTampered, ProcessExited, ProcessStarted
from ..._policy.startup_fault import read_exit
from ..._status import InstanceState, InstanceStatus
from ..._stop_reasons import StopReason
from ..mailbox import Crash, Crashed
from ..messages import (
    Annotate,
    DeepHealth,
    GetHealth,
    GetStatus,
    InstanceCommand,
    ReplyTo,
    Restart,
    Shutdown,
    Start,
    Stop,
)
from . import verdicts
from .effects import (
    Answer,
    AnswerStatus,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    ConfirmAdopted,
    Effect,
    Effects,
    Emit,
    EndActor,
    EndProcessWatch,
    ForgetWatches,
    Refuse,
    Spawn,
    Terminate,
    WatchAdopted,
    WatchProcess,
)
from .messages import (
    NOTHING_SEEN,
    Confirmed,
    DeepHealthDone,
    Exited,
    ExposureFound,
    Internal,
    PinChanged,
    Probed,
    ReadinessExpired,
    Seen,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    StartupFault,
    Stopped,
    WatchdogResult,
)
from .state import State, StopCaller
from .stopping import (
    ABANDONED_GRACE_S,
    CRASH_GRACE_S,
    STARTUP_FAULT_GRACE_S,
    stop_process,
)

Message = InstanceCommand | Internal | Crashed
"""Everything the instance actor's inbox carries."""


def step(
    state: State, message: Message, now: float, seen: Seen = NOTHING_SEEN
) -> tuple[State, tuple[Effect, ...]]:
    """The instance's next state and what the actor must do, in order, for ``message``
    taken at trio time ``now`` (float seconds); ``seen``: what the actor read of the live
    world then. Never raises for a message of `Message`; never waits."""
    out: Effects = []
    if isinstance(message, Crashed):
        state = _on_crash(state, message.crash, out)
    elif isinstance(message, Internal):
        state = _apply(state, message, now, seen, out)
    else:
        state = _command(state, message, seen, out)
    return _date_stop(state, out, now), tuple(out)


def _date_stop(state: State, out: Effects, now: float) -> State:
    """A stop of the process whose SIGTERM this step sent (`Terminate`, or the unload's
    `CloseDown`) kills it at ``now`` + its grace: the status says that deadline."""
    if state.process is None or state.stop_deadline is not None:
        return state
    for effect in out:
        if isinstance(effect, Terminate | CloseDown) and effect.process is state.process:
            return attrs.evolve(state, stop_deadline=now + effect.grace_s)
    return state


# Commands.


def _command(state: State, command: InstanceCommand, seen: Seen, out: Effects) -> State:
    if state.closing:
        who = state.setup.instance_id
        out.append(Refuse(command.reply, UnknownInstance(f"{who} is being unloaded")))
        return state
    match command:
        case Start():
            return _on_start(state, command.reply, seen, out, restart=False)
        case Restart():
            return _on_start(state, command.reply, seen, out, restart=True)
        case Stop():
            return _on_stop(state, command, out)
        case GetStatus():  # `InferRuntime.status` reads the board; this answers the same
            out.append(AnswerStatus(command.reply))
        case GetHealth():
            out.append(CheckHealth(state.process, command.reply))
        case DeepHealth():
            out.append(CheckDeepHealth(state.process, command.reply))
        case Annotate():
            out.append(Answer(command.reply, None))
            return attrs.evolve(
                state,
                supervision=command.supervision,
                restarts=command.restarts,
                given_up=command.gave_up,
            )
        case Shutdown():
            return _on_shutdown(state, command, out)
        case _:
            assert_never(command)
    return state


def _on_start(
    state: State, reply: ReplyTo[None], seen: Seen, out: Effects, *, restart: bool
) -> State:
    who = state.setup.instance_id
    if not state.managed and restart and not state.wanted:
        out.append(Refuse(reply, InvalidState(f"{who} is not being watched")))
    elif not state.managed:
        out.append(ConfirmAdopted(reply))  # an adopted server is only checked
    elif state.exposed is not None:  # held down until reload
        why = f"the server was stopped for listening beyond loopback ({state.exposed})"
        out.append(Refuse(reply, InvalidState(f"{why}; reload the instance")))
    elif state.starting and not restart:  # concurrent starts coalesce
        return attrs.evolve(state, start_callers=(*state.start_callers, reply))
    elif state.process is not None or state.starting:  # one process at a time
        out.append(Refuse(reply, InvalidState(f"{who} is already running")))
    elif reply in seen.gone and not restart:
        pass  # its caller gave up before we read it: spawn nothing
    elif restart and not state.wanted:  # an operator stop is never undone
        out.append(Refuse(reply, InvalidState(f"{who} was stopped by the operator")))
    else:
        out.append(Spawn(reply, state.held))  # a hold goes with it: checked, not read
        return attrs.evolve(state, starting=True, start_callers=(reply,))
    return state


def _on_stop(state: State, command: Stop, out: Effects) -> State:
    who = state.setup.instance_id
    if not state.managed:
        why = "inferactors observes it and never stops it; unload forgets the registration"
        out.append(Refuse(command.reply, Unsupported(f"{who} is adopted: {why}")))
        return state
    wanted, state = state.wanted, attrs.evolve(state, wanted=False)
    if state.starting:  # stopped once spawned (`_on_spawned`)
        return attrs.evolve(state, stops_after_start=(*state.stops_after_start, command))
    if state.process is None and wanted and state.last is not None:
        return _stop_between_runs(state, command, state.last, out)
    if state.process is None:
        out.append(Refuse(command.reply, InvalidState(f"{who} is not running")))
        return state
    callers = (*state.stop_callers, StopCaller(state.process, command.reply))
    state = attrs.evolve(state, stop_callers=callers)
    return stop_process(state, command.reason, command.grace_s, out)


def _stop_between_runs(state: State, command: Stop, last: RunEvidence, out: Effects) -> State:
    """An operator's stop of a server that exited and is still wanted (a restart pending
    in backoff, or given up): nothing runs, so the stop is answered at once with the last
    exit's evidence. Between a crash and its restart, its reason becomes the stop's (the
    view reads ``stopped``, not a crash) and the supervisor's note (restarting in ...) no
    longer holds; the supervisor cancels the pending restart, and a restart that still
    arrives is refused (unwanted). A given-up server keeps its view: the give-up and the
    exit that caused it stay what it says (the stop changes nothing that ran)."""
    out.append(Answer(command.reply, last))
    if state.given_up:
        return state
    return attrs.evolve(state, last_reason=command.reason, supervision=None)


def _on_shutdown(state: State, command: Shutdown, out: Effects) -> State:
    state = attrs.evolve(state, closing=True)
    if state.process is not None and state.stop_reason is None:
        state = attrs.evolve(state, stop_reason=StopReason.UNLOAD)
    out.append(CloseDown(state.process, command.grace_s, command.reply))
    return state


# Results posted by workers.


def _apply(state: State, message: Internal, now: float, seen: Seen, out: Effects) -> State:
    match message:
        case Spawned():
            return _on_spawned(state, message, seen, out)
        case SpawnFailed():
            return _on_spawn_failed(state, message, now, out)
        case Exited():
            return _on_exited(state, message.process, message.evidence, now, seen, out)
        case Stopped():
            state = _on_exited(state, message.process, message.evidence, now, seen, out)
            return _answer_stop(state, message.process, message.evidence, out)
        case Probed():
            return verdicts.on_probed(state, message, now, seen, out)
        case ExposureFound():
            return verdicts.on_exposure(
                state, message.process, message.exposure.describe(), now, out
            )
        case PinChanged():
            return verdicts.on_pin_changed(state, message, now, out)
        case StartupFault():
            if message.process is state.process and not state.findings.ready_once:
                return stop_process(state, StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S, out)
        case ReadinessExpired():
            return verdicts.on_readiness_expired(state, message, now, out)
        case WatchdogResult():
            return verdicts.on_watchdog(state, message, now, out)
        case DeepHealthDone():
            if message.process is state.process:
                return verdicts.passed(state, message.ttft_s, now, out)
        case Confirmed():
            state = attrs.evolve(state, wanted=True)  # watched: a crash restarts the watching
            if not state.adopted_watch:  # its watchdog starts with this watch
                out.append(WatchAdopted())
                state = attrs.evolve(state, adopted_watch=True).with_findings(ready_once=False)
            out.append(Answer(message.reply, None))
            return state
        case ShutdownDone():
            out += [Answer(message.reply, None), EndActor()]
        case _:
            assert_never(message)
    return state


def _on_spawned(state: State, message: Spawned, seen: Seen, out: Effects) -> State:
    process, who = message.process, state.setup.instance_id
    callers, stops = state.start_callers, state.stops_after_start
    crash = state.crash_while_starting
    state = attrs.evolve(
        state.spawned(process),
        start_callers=(),
        stops_after_start=(),
        crash_while_starting=None,
        process_watch=True,
        start_error=None,
        given_up=False,
    )
    args = process.args  # as executed: the pinned launch, not the plan's
    out.append(Emit(ProcessStarted(who, process.pid, args, process.started_at)))
    out.append(WatchProcess(process, message.pins))
    abandoned = bool(callers) and all(reply in seen.gone for reply in callers)
    if crash is not None:
        why = f"the start of {who} was aborted by a crash ({crash.describe()})"
    elif stops or abandoned:
        why = f"the start of {who} was aborted by a stop"
    else:
        out += [Answer(reply, None) for reply in callers]
        return state
    out += [Refuse(reply, InvalidState(why)) for reply in callers]
    for stop in stops:
        state = _on_stop(state, stop, out)
    if abandoned and not stops:  # nobody waits for it: stopped at once, as by a stop
        state = attrs.evolve(state, wanted=False)
        state = stop_process(state, StopReason.REQUESTED, ABANDONED_GRACE_S, out)
    if crash is not None:
        state = _stop_for_crash(state, crash, out)
    return state


def _on_spawn_failed(state: State, message: SpawnFailed, now: float, out: Effects) -> State:
    who = state.setup.instance_id
    hold = message.hold
    if hold is not None and hold != state.held:  # held down; never counted (supervisor)
        error = hold.error
        out.append(Emit(ModelTampered(who, error.model, error.shard, error.why, now)))
        state = attrs.evolve(state, held=hold)
    out += [Refuse(reply, message.error) for reply in state.start_callers]
    not_running = InvalidState(f"{who} is not running")
    out += [Refuse(stop.reply, not_running) for stop in state.stops_after_start]
    return attrs.evolve(
        state,
        starting=False,
        start_callers=(),
        stops_after_start=(),
        crash_while_starting=None,  # nothing runs: nothing to stop
        start_error=None if hold is not None else str(message.error),  # a hold says itself
    )


def _on_exited(
    state: State,
    process: ManagedProcess,
    evidence: RunEvidence,
    now: float,
    seen: Seen,
    out: Effects,
) -> State:
    """The current process ended (a second report of the same exit changes nothing): its
    reason is the pending stop's, else a crash, or a start-up failure when it never was
    ready and its output (or what it showed while it lived) says why (`read_exit`)."""
    if process is not state.process:
        return state
    setup, found = state.setup, state.findings
    out.append(EndProcessWatch())
    full = attrs.evolve(evidence, runtime=setup.runtime_id, instance_id=setup.instance_id)
    reading = read_exit(
        state.stop_reason or StopReason.CRASH,
        ever_ready=found.ready_once,
        live=seen.fatal or found.live_fault,
        stdout=full.stdout_tail,
        stderr=full.stderr_tail,
    )
    reason = reading.reason
    out.append(
        Emit(
            ProcessExited(
                setup.instance_id,
                evidence.pid,
                evidence.exit_code,
                evidence.signal,
                reason,
                now,
                survivors=evidence.survivors,
                diagnosis=reading.diagnosis,
                last_lines=reading.last_lines,
            )
        )
    )
    return attrs.evolve(
        state,
        process=None,
        stop_reason=None,
        stop_deadline=None,
        process_watch=False,
        last=full,
        last_reason=reason,
        diagnosis=reading.diagnosis,
        last_lines=reading.last_lines,
    )


def _answer_stop(
    state: State, process: ManagedProcess, evidence: RunEvidence, out: Effects
) -> State:
    setup = state.setup
    full = attrs.evolve(evidence, runtime=setup.runtime_id, instance_id=setup.instance_id)
    mine = [caller for caller in state.stop_callers if caller.process is process]
    if not mine:
        return state
    out += [Answer(caller.reply, full) for caller in mine]
    rest = tuple(caller for caller in state.stop_callers if caller.process is not process)
    return attrs.evolve(state, stop_callers=rest)


# A crash (the mailbox emitted `InstanceCrashed`, cancelled the watching workers and
# answered their callers).


def _on_crash(state: State, crash: Crash, out: Effects) -> State:
    out.append(ForgetWatches())
    state = attrs.evolve(state, process_watch=False, adopted_watch=False)
    if state.closing:
        return state  # the unload under way finishes the job
    if not state.managed:  # never signalled; the next probe says how it is
        detail = f"crashed ({crash.describe()})"
        return state.with_findings(mapped=InstanceStatus(InstanceState.DEGRADED, detail))
    if state.starting:
        return attrs.evolve(state, crash_while_starting=crash)  # stopped once spawned
    return _stop_for_crash(state, crash, out)


def _stop_for_crash(state: State, crash: Crash, out: Effects) -> State:
    if state.process is None or state.stop_reason is not None:
        return state  # nothing runs, or a stop is under way: its reason stands
    detail = f"crashed ({crash.describe()}); stopping its server"
    state = state.with_findings(mapped=InstanceStatus(InstanceState.DEGRADED, detail))
    return stop_process(state, StopReason.ERROR, CRASH_GRACE_S, out)
