"""How the instance actor judges what its watching tasks report (pure; no trio, no I/O):
a probe's report, the readiness deadline, the watchdog's deep-health checks, an exposure
beyond loopback and a verified model file that changed. `step` (``step.py``) hands each
such message here; the rules take the state, the message, the time and what the actor saw
(`Seen`) and append their effects, as the rest of `step` does.

The rules, in the order they win:

* A probe's report: see `judge_report` (the first function below), one rule per comment,
  in order.
* Holds: a server found listening beyond loopback, or whose verified model file changed,
  is stopped and held down (never restarted); a start-up fault, a missed readiness
  deadline (moved on by the time our own late loop lost in its window, given back from
  the moment it caught up), a failing watchdog and a long unhealthy spell stop it. A
  watchdog check that gave no verdict (our own loop ran late) counts for nothing.
"""

from __future__ import annotations

import attrs

from ..._edges.process import ManagedProcess
from ..._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    ExposureDetected,
    ImpostorDetected,
    ModelTampered,
)
from ..._policy.health_truth import (
    confirmed_status,
    refused_detail,
    slow_detail,
    worth_confirming,
)
from ..._policy.lateness import Lateness, gives_no_verdict
from ..._policy.probe_report import Loading, Unhealthy, Unreachable, serving
from ..._policy.status import map_ollama_report, map_report
from ..._status import InstanceState, InstanceStatus
from ..._stop_reasons import Diagnosis, FaultKind, StopReason
from . import status
from .effects import (
    Effects,
    Emit,
    NoteProbeTime,
    StartWatchdog,
    StopReadingLines,
    TimeReadiness,
)
from .messages import PinChanged, Probed, ReadinessExpired, Seen, WatchdogResult
from .state import State
from .stopping import (
    EXPOSURE_GRACE_S,
    HEALTH_KILL_GRACE_S,
    STARTUP_FAULT_GRACE_S,
    TAMPERED_GRACE_S,
    stop_process,
)

UNHEALTHY_KILL_AFTER_S = 3.0
"""How long a ready managed server may stay unhealthy (every probe) before it is killed."""

MISBOUND_SETTLE_S = 1.0
"""How long a starting managed server must keep listening only on the other address family
(two socket-table reads at least) before it is stopped as a configuration error: a server
that binds ``::1`` a moment before 127.0.0.1 is not one (float seconds)."""


def judge_report(state: State, probed: Probed, now: float, seen: Seen, out: Effects) -> State:
    """One probe's report of the current process (or of the adopted server): every rule,
    in the order it wins. Rules 3 to 6 make the probe's verdict (`Findings.mapped`), on
    which `status.status_of` lays its own rules."""
    setup, found, report = state.setup, state.findings, probed.report
    health, who = report.health, setup.instance_id
    # 1. A report of a process that just died is dropped: its exit is on the way. So is a
    #    report that gives no verdict (our own loop ran late, `ServerReport.no_verdict`):
    #    however many come, nothing is judged; the next probe made on time judges. How
    #    long none judged is noted, for the status to say (`status.status_of`).
    if state.process is not None and not seen.running:
        return state
    if report.no_verdict:
        return state.with_findings(no_verdict_for_s=probed.no_verdict_for_s)
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
        no_verdict_for_s=0.0,
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
        state = stop_process(state, StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S, out)
    # 8. A deep health this probe measured (first token, confirmation) is published.
    if probed.ttft_s is not None:
        state = passed(state, probed.ttft_s, now, out)
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
    return stop_process(state, StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S, out)


def passed(state: State, ttft_s: float, now: float, out: Effects) -> State:
    """A deep health passed: publish its time to first token, note whether it was slow."""
    out.append(Emit(DeepHealthPassed(state.setup.instance_id, ttft_s, now)))
    slow = slow_detail(ttft_s, state.setup.slow_after_s)
    return state.with_findings(ttft_s=ttft_s, slow=slow, completions_worked=True)


def on_probed(state: State, message: Probed, now: float, seen: Seen, out: Effects) -> State:
    """Apply a probe's report, or its exposure."""
    exposure = message.exposure
    if exposure is not None and not state.managed:
        state = _on_adopted_exposure(state, exposure.describe(), now, out)
    if exposure is not None and message.process is not None:
        return on_exposure(state, message.process, exposure.describe(), now, out)
    if message.process is state.process and not (state.managed and state.process is None):
        return judge_report(state, message, now, seen, out)
    return state


def on_exposure(
    state: State, process: ManagedProcess, detail: str, now: float, out: Effects
) -> State:
    """A managed server found listening beyond loopback is stopped and stays stopped until
    reload."""
    if process is not state.process or state.exposed is not None:
        return state
    out.append(Emit(ExposureDetected(state.setup.instance_id, detail, now)))
    state = attrs.evolve(state, exposed=detail, wanted=False)
    return stop_process(state, StopReason.EXPOSURE, EXPOSURE_GRACE_S, out)


def _on_adopted_exposure(state: State, detail: str, now: float, out: Effects) -> State:
    """An adopted server's exposure is reported (each new finding once), never acted on."""
    if state.exposed == detail:
        return state
    note = f"{detail} (reported only: inferactors never signals an adopted server)"
    out.append(Emit(ExposureDetected(state.setup.instance_id, note, now)))
    return attrs.evolve(state, exposed=detail)


def on_readiness_expired(
    state: State, message: ReadinessExpired, now: float, out: Effects
) -> State:
    """A server not ready by its deadline is killed (grace 0), unless our own loop lost
    more than `LATE_S` of the window (we could not watch it meanwhile: `LATE_S` in
    ``_policy/lateness.py``): then it gets the time lost back, from now that we watch it
    again, and the deadline is judged anew. Time is given back for at most one more whole
    window (the kill comes by ``2 * timeout_s`` after the spawn at the latest): a loop
    that keeps stalling would otherwise keep a server that never loads starting for ever,
    its memory held and every request for it waiting in vain."""
    if message.process is not state.process or state.findings.ready_once:
        return state
    overdue = now - message.process.started_at >= 2 * message.timeout_s
    if not overdue and gives_no_verdict(Lateness(stalled_s=message.lost_s)):
        deadline = now + message.lost_s
        out.append(TimeReadiness(message.process, message.timeout_s, deadline))
        return state
    return stop_process(state, StopReason.READINESS_TIMEOUT, 0.0, out)


def on_watchdog(state: State, message: WatchdogResult, now: float, out: Effects) -> State:
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
        state = passed(state, message.ttft_s, now, out)
    if why is not None:
        failures = state.findings.health_failures
        out.append(Emit(DeepHealthFailed(state.setup.instance_id, failures, why, now)))
        if failures >= limit and state.process is not None:
            state = stop_process(state, StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S, out)
    return state


def on_pin_changed(state: State, message: PinChanged, now: float, out: Effects) -> State:
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
    return stop_process(state, StopReason.TAMPERED, TAMPERED_GRACE_S, out)
