"""Every decision of the instance actor: ``step(state, message, now, seen)`` (pure; no
trio, no I/O).

The actor (``actor.py``) takes one message at a time, calls `step`, keeps the new `State`
and carries out the `Effect` values in order (llama-swap's router: its scheduler returns,
the run loop acts). Nothing else writes the state, and nothing here waits or signals.

A message is a command (``_actors/messages.py``: start, stop, restart, status, health,
deep health, annotate, shutdown), a worker's result (``messages.py``) or `Crashed`. What
the rules need of the live world (does the process still run, did a caller give up) the
actor reads as it takes the message and hands over as `Seen`.

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
* A probe's report: see `judge_report`, one rule per line, in order.
* Holds: a server found listening beyond loopback, or whose verified model file changed,
  is stopped and held down (never restarted); a start-up fault, a missed readiness
  deadline (moved on by the time our own late loop lost in its window, given back from
  the moment it caught up), a failing
  watchdog and a long unhealthy spell stop it. A watchdog check that
  gave no verdict (our own loop ran late) counts for nothing.
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
from ..._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    Diagnosis,
    ExposureDetected,
    FaultKind,
    ImpostorDetected,
    ModelTampered,
    ProcessExited,
    ProcessStarted,
    StopReason,
)
from ..._policy.health_truth import (
    confirmed_status,
    refused_detail,
    slow_detail,
    worth_confirming,
)
from ..._policy.lateness import Lateness, gives_no_verdict
from ..._policy.probe_parse import Loading, Unhealthy, Unreachable, serving
from ..._policy.startup_fault import read_exit
from ..._policy.status import map_ollama_report, map_report
from ..._status import InstanceState, InstanceStatus
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
from . import status
from .effects import (
    Answer,
    AnswerStatus,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    ConfirmAdopted,
    Effect,
    Emit,
    EndActor,
    EndProcessWatch,
    ForgetWatches,
    NoteProbeTime,
    Refuse,
    Spawn,
    StartWatchdog,
    StopReadingLines,
    Terminate,
    TimeReadiness,
    WatchAdopted,
    WatchProcess,
)
from .messages import (
    Confirmed,
    DeepHealthDone,
    Exited,
    ExposureFound,
    Internal,
    PinChanged,
    Probed,
    ReadinessExpired,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    StartupFault,
    Stopped,
    WatchdogResult,
)
from .state import State, StopCaller

CRASH_GRACE_S = 3.0
"""Grace for a server stopped because its instance crashed (as for a health kill)."""

ABANDONED_GRACE_S = 5.0
"""SIGTERM grace for the server of a start every caller gave up on."""

EXPOSURE_GRACE_S = 3.0
"""Grace for a server stopped for listening beyond loopback."""

HEALTH_KILL_GRACE_S = 3.0
"""Grace for a server killed by the deep-health watchdog or for staying unhealthy."""

TAMPERED_GRACE_S = 3.0
"""Grace for a server stopped because a verified model file changed while it served."""

STARTUP_FAULT_GRACE_S = 0.5
"""Grace for a starting server that printed a fault it hangs on, or shows a configuration
error while it lives: stopped within 1 s of the line (mlx_lm.server whose bind failed
ignores SIGTERM and gets SIGKILL)."""

UNHEALTHY_KILL_AFTER_S = 3.0
"""How long a ready managed server may stay unhealthy (every probe) before it is killed."""

MISBOUND_SETTLE_S = 1.0
"""How long a starting managed server must keep listening only on the other address family
(two socket-table reads at least) before it is stopped as a configuration error: a server
that binds ``::1`` a moment before 127.0.0.1 is not one (float seconds)."""


@attrs.frozen
class Seen:
    """What the actor read of the live world as it took a message: the rules never read a
    process or a channel themselves."""

    running: bool = True
    """The current process's exit has not been noticed yet (`ManagedProcess.running`)."""
    fatal: Diagnosis | None = None
    """The fatal start-up line the current process printed (`LineWatch.fatal`)."""
    gone: frozenset[object] = frozenset()
    """The callers (reply channels) that gave up: of the message, and of the start under
    way (`caller_gone`: the caller closed its end)."""


NOTHING_SEEN = Seen()
"""A message taken with a live process, no caller gone and no fatal line."""

Message = InstanceCommand | Internal | Crashed
"""Everything the instance actor's inbox carries."""

Effects = list[Effect]
"""The effects one step has asked for so far, in order."""


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
    return _stop_process(state, command.reason, command.grace_s, out)


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


def _stop_process(state: State, reason: StopReason, grace_s: float, out: Effects) -> State:
    """Stop the process for ``reason`` with ``grace_s`` seconds between TERM and KILL,
    unless there is none or a stop is already under way (whose reason is kept)."""
    if state.process is None or state.stop_reason is not None:
        return state
    out.append(Terminate(state.process, grace_s))
    return attrs.evolve(state, stop_reason=reason)


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
            return _on_probed(state, message, now, seen, out)
        case ExposureFound():
            return _on_exposure(state, message.process, message.exposure.describe(), now, out)
        case PinChanged():
            return _on_pin_changed(state, message, now, out)
        case StartupFault():
            if message.process is state.process and not state.findings.ready_once:
                return _stop_process(state, StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S, out)
        case ReadinessExpired():
            return _on_readiness_expired(state, message, now, out)
        case WatchdogResult():
            return _on_watchdog(state, message, now, out)
        case DeepHealthDone():
            if message.process is state.process:
                return _passed(state, message.ttft_s, now, out)
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
        state = _stop_process(state, StopReason.REQUESTED, ABANDONED_GRACE_S, out)
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


# What the watching tasks report.


def _on_probed(state: State, message: Probed, now: float, seen: Seen, out: Effects) -> State:
    """Apply a probe's report, or its exposure."""
    exposure = message.exposure
    if exposure is not None and not state.managed:
        state = _on_adopted_exposure(state, exposure.describe(), now, out)
    if exposure is not None and message.process is not None:
        return _on_exposure(state, message.process, exposure.describe(), now, out)
    if message.process is state.process and not (state.managed and state.process is None):
        return judge_report(state, message, now, seen, out)
    return state


def judge_report(state: State, probed: Probed, now: float, seen: Seen, out: Effects) -> State:
    """One probe's report of the current process (or of the adopted server): every rule,
    in the order it wins. Rules 3 to 6 make the probe's verdict (`Findings.mapped`), on
    which `status.status_of` lays its own rules."""
    setup, found, report = state.setup, state.findings, probed.report
    health, who = report.health, setup.instance_id
    # 1. A report of a process that just died is dropped: its exit is on the way. So is a
    #    report that gives no verdict (our own loop ran late, `ServerReport.no_verdict`):
    #    however many come, nothing is judged; the next probe made on time judges.
    if (state.process is not None and not seen.running) or report.no_verdict:
        return state
    # 2. A listener on our port that is not our process is an impostor (said once); one
    #    that is ours clears it.
    impostor, identity_ok = found.impostor, found.identity_ok
    if probed.owner_ok is False and impostor is None:
        impostor = f"impostor: port {setup.port} is held by pid {probed.owner_pid}, not our server"
        out.append(Emit(ImpostorDetected(who, probed.owner_pid, impostor, now)))
    elif probed.owner_ok is True:
        identity_ok, impostor = True, None
    # 3. The server's own word: ``/health`` and the model list (`map_report`; an adopted
    #    Ollama by Ollama's rules). A silent server that answered before went away.
    answered = found.answered or not isinstance(health, Unreachable)
    alive = (state.process is not None and seen.running) or not state.managed
    mapped = map_report(
        report,
        model=setup.listed_names,
        alive=alive,
        adopted=not state.managed,
        answered=answered,
        stopped=probed.stopped,
    )
    out.append(NoteProbeTime(report.latency_s, now))
    if setup.ollama_tag is not None:
        mapped = map_ollama_report(report, tag=setup.ollama_tag, adopted=True)
    # 4. A completion that checks a failed ``/health``: it works ("...; completions
    #    work"), is under way ("...; checking ..."), or failed too (said after the verdict).
    confirmation = found.confirmation
    if serving(health) or isinstance(health, Loading):
        confirmation = None
    elif probed.confirmation is not None:
        confirmation = probed.confirmation
    worked = found.completions_worked
    if confirmation is not None and not confirmation.pending:
        worked = confirmation.works
    truth = confirmed_status(health, confirmation)
    if truth is not None:
        mapped = truth
    elif confirmation is not None and worth_confirming(health):
        detail = f"{mapped.detail}; completions fail too ({confirmation.why})"
        mapped = attrs.evolve(mapped, detail=detail)
    # 5. The port listening only on the other address family is said at once ("" from
    #    the monitor: it looked and found nothing wrong; None: the last verdict stands).
    misbound = found.misbound
    if not isinstance(health, Unreachable):
        misbound = None
    elif probed.misbound is not None:
        misbound = probed.misbound or None
    if misbound is not None:
        mapped = InstanceStatus(InstanceState.DEGRADED, misbound)
    # 6. A request refused for want of the right API key is said at once.
    refused = report.refused
    refused = None if refused is None else refused_detail(refused, key_sent=setup.key_sent)
    if refused is not None:
        mapped = InstanceStatus(InstanceState.DEGRADED, refused)
    state = state.with_findings(
        mapped=mapped,
        last_probe=status.probe_words(report),
        first_token=probed.first_token if probed.first_token is not None else found.first_token,
        answered=answered,
        impostor=impostor,
        identity_ok=identity_ok,
        confirmation=confirmation,
        completions_worked=worked,
        misbound=misbound,
        refused=refused,
    )
    # 7. A configuration error a starting managed server shows while it lives (it refuses
    #    our requests, or stays misbound for `MISBOUND_SETTLE_S`) stops it: a start-up
    #    failure that its exit reports, not a crash loop.
    state = _note_config_fault(state, now)
    if state.findings.live_fault is not None and not state.findings.ready_once:
        state = _stop_process(state, StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S, out)
    # 8. A deep health this probe measured (first token, confirmation) is published.
    if probed.ttft_s is not None:
        state = _passed(state, probed.ttft_s, now, out)
    # 9. Ready (up, listing our model, ours, one token back; an adopted server: Running):
    #    the first time, its output is no longer read and its watchdog starts.
    if status.ready(state) or (not state.managed and mapped.state is InstanceState.RUNNING):
        state = _on_ready(state, out)
    # 10. A ready managed server unhealthy for `UNHEALTHY_KILL_AFTER_S` is killed, unless
    #     completions work around it.
    return _note_health(state, health, now, out)


def _note_config_fault(state: State, now: float) -> State:
    """Rule 7's bookkeeping: only while a managed process starts (never once ready)."""
    found = state.findings
    if not state.managed or state.process is None or found.ready_once:
        return state
    since = found.misbound_since
    if found.misbound is None:
        since = None
    elif since is None:
        since = now
    fault = found.live_fault
    if found.refused is not None:
        fault = Diagnosis(FaultKind.REFUSES_REQUESTS, found.refused)
    elif found.misbound is not None and now - (since or now) >= MISBOUND_SETTLE_S:
        fault = Diagnosis(FaultKind.WRONG_ADDRESS_FAMILY, found.misbound)
    return state.with_findings(misbound_since=since, live_fault=fault)


def _on_ready(state: State, out: Effects) -> State:
    if state.findings.ready_once:
        return state
    process = state.process
    if process is not None:
        out.append(StopReadingLines(process))  # Running: output no longer read line by line
    watching = state.process_watch if process is not None else state.adopted_watch
    if state.setup.watchdog_failures is not None and watching:
        out.append(StartWatchdog(process))
    return state.with_findings(ready_once=True)


def _note_health(state: State, health: object, now: float, out: Effects) -> State:
    """Rule 10: a server that was ready turning unhealthy (not loading: e.g. mlx_lm.server
    whose generation thread died) is killed once it stayed so `UNHEALTHY_KILL_AFTER_S`."""
    found = state.findings
    confirmed = found.confirmation is not None and found.confirmation.why is None
    unhealthy = state.managed and found.ready_once and isinstance(health, Unhealthy)
    if not unhealthy or confirmed:  # completions work (or are being checked): not killed
        if found.unhealthy_since is None:
            return state
        return state.with_findings(unhealthy_since=None)
    assert isinstance(health, Unhealthy)
    since = found.unhealthy_since if found.unhealthy_since is not None else now
    state = state.with_findings(unhealthy_since=since)
    lasted = now - since
    if lasted < UNHEALTHY_KILL_AFTER_S:
        return state
    state = state.with_findings(health_failed=f"unhealthy for {lasted:.1f} s: {health.why}")
    return _stop_process(state, StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S, out)


def _passed(state: State, ttft_s: float, now: float, out: Effects) -> State:
    """A deep health passed: publish its time to first token, note whether it was slow."""
    out.append(Emit(DeepHealthPassed(state.setup.instance_id, ttft_s, now)))
    slow = slow_detail(ttft_s, state.setup.slow_after_s)
    return state.with_findings(ttft_s=ttft_s, slow=slow, completions_worked=True)


def _on_readiness_expired(
    state: State, message: ReadinessExpired, now: float, out: Effects
) -> State:
    """A server not ready by its deadline is killed (grace 0), unless our own loop lost
    more than `LATE_S` of the window (we could not watch it meanwhile: `LATE_S` in
    ``_policy/lateness.py``): then it gets the time lost back, from now that we watch it
    again, and the deadline is judged anew."""
    if message.process is not state.process or state.findings.ready_once:
        return state
    if gives_no_verdict(Lateness(stalled_s=message.lost_s)):
        deadline = now + message.lost_s
        out.append(TimeReadiness(message.process, message.timeout_s, deadline))
        return state
    return _stop_process(state, StopReason.READINESS_TIMEOUT, 0.0, out)


def _on_watchdog(state: State, message: WatchdogResult, now: float, out: Effects) -> State:
    """Count a watchdog check; stop the process once the failures in a row reach the
    limit (an adopted server is only marked). A check that gave no verdict (our own loop
    ran late) is neither: nothing is counted, reset or said."""
    limit = state.setup.watchdog_failures
    if message.process is not state.process or limit is None or message.no_verdict:
        return state
    found, why = state.findings, message.why
    if why is None:
        state = state.with_findings(health_failures=0, health_failed=None)
    else:
        failures = found.health_failures + 1
        state = state.with_findings(health_failures=failures, completions_worked=False)
        if failures >= limit:
            state = state.with_findings(health_failed=f"deep health failed {failures} times: {why}")
    if message.ttft_s is not None:
        state = _passed(state, message.ttft_s, now, out)
    if why is not None:
        failures = state.findings.health_failures
        out.append(Emit(DeepHealthFailed(state.setup.instance_id, failures, why, now)))
        if failures >= limit and state.process is not None:
            state = _stop_process(state, StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S, out)
    return state


def _on_exposure(
    state: State, process: ManagedProcess, detail: str, now: float, out: Effects
) -> State:
    """A managed server found listening beyond loopback is stopped and stays stopped until
    reload."""
    if process is not state.process or state.exposed is not None:
        return state
    out.append(Emit(ExposureDetected(state.setup.instance_id, detail, now)))
    state = attrs.evolve(state, exposed=detail, wanted=False)
    return _stop_process(state, StopReason.EXPOSURE, EXPOSURE_GRACE_S, out)


def _on_adopted_exposure(state: State, detail: str, now: float, out: Effects) -> State:
    """An adopted server's exposure is reported (each new finding once), never acted on."""
    if state.exposed == detail:
        return state
    note = f"{detail} (reported only: inferactors never signals an adopted server)"
    out.append(Emit(ExposureDetected(state.setup.instance_id, note, now)))
    return attrs.evolve(state, exposed=detail)


def _on_pin_changed(state: State, message: PinChanged, now: float, out: Effects) -> State:
    """A verified file changed under the running server: what a tampered spawn does
    (`ModelTampered`, held down until re-registration or reload), and the server is stopped
    (stop reason ``tampered``: never restarted, never counted)."""
    if message.process is not state.process or state.held is not None:
        return state
    error = message.hold.error
    out.append(
        Emit(ModelTampered(state.setup.instance_id, error.model, error.shard, error.why, now))
    )
    state = attrs.evolve(state, held=message.hold, wanted=False)
    return _stop_process(state, StopReason.TAMPERED, TAMPERED_GRACE_S, out)


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
    return _stop_process(state, StopReason.ERROR, CRASH_GRACE_S, out)
