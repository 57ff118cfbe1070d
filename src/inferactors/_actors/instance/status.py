"""How an instance's `State` reads as an `InstanceStatus` (pure; no trio, no I/O).

The actor publishes `status_of` after every message it takes (design/actors.md, "Status is
published"). The order in which what we know wins, from the probe's verdict up:

1. No process of a managed instance: `idle_status` (Loaded, or Exited with why).
2. The probe's verdict (`Findings.mapped`, made by ``step.py``'s probe rules); when it is
   Running but no probe has given a verdict for ``SAY_NO_VERDICT_S`` (our own loop ran
   late), it says so with its last answer (``_policy/lateness.py`` `no_verdict_words`).
3. An impostor on our port; then a failed health (watchdog, unhealthy too long).
4. A managed server that is up is not Running before the listener is proven ours, nor
   before one real token came back ("starting: ...").
5. A Running server whose last deep health was slow is Degraded (slow).
6. The pid, uptime and any process that left its group are added to what stands.

Rules 3 and 4 are also what makes a server *ready* (`ready`).
"""

from __future__ import annotations

import attrs

from ..._policy.lateness import no_verdict_words
from ..._policy.probe_report import Busy, Loading, ServerReport, Unhealthy, Unreachable, Up
from ..._policy.restart import CONFIG_ERROR
from ..._status import InstanceState, InstanceStatus
from ..._stop_reasons import StopReason
from .state import State

_REASON_WORDS = {
    StopReason.REQUESTED: "stopped on request",
    StopReason.CRASH: "server process exited",
    StopReason.READINESS_TIMEOUT: "killed: not ready before the readiness deadline",
    StopReason.HEALTH_KILL: "killed: deep health failed",
    StopReason.UNLOAD: "stopped for unload",
    StopReason.SHUTDOWN: "stopped: the runtime shut down",
    StopReason.ERROR: "stopped: the instance crashed (see its InstanceCrashed event)",
    StopReason.TAMPERED: "stopped: a verified model file changed while served",
    StopReason.STARTUP_FAILURE: "failed to start",
    StopReason.TTL: "stopped: idle for its TTL (front door)",
    StopReason.EVICTED: "stopped: evicted to make room for another model (front door)",
    StopReason.RELOAD: "stopped for a reload that changed or removed it",
}


def probe_words(report: ServerReport) -> str:
    """What a probe found, in a few words: ``up``, ``loading``, ``unreachable: why``."""
    health = report.health
    if isinstance(health, Up):
        return "up"
    if isinstance(health, Loading):
        return "loading"
    if isinstance(health, Busy):
        return "busy"
    if isinstance(health, Unhealthy | Unreachable):
        return f"{type(health).__name__.lower()}: {health.why}"
    return type(health).__name__.lower()


def status_of(state: State, now: float, escaped: tuple[int, ...] = ()) -> InstanceStatus:
    """The status to report at trio time ``now``; ``escaped``: the pids of the current
    process that left its process group (`ManagedProcess.escaped`, read by the actor)."""
    managed, process, found = state.managed, state.process, state.findings
    base = found.mapped if process is not None or not managed else idle_status(state)
    if process is not None or not managed:
        base = _unverdicted(state, base)
    if process is not None:
        base = _slow(state, live_overrides(state, base))
        base = attrs.evolve(
            base,
            pid=process.pid,
            uptime_s=now - process.started_at,
            stop_deadline=state.stop_deadline,
        )
        base = _flag_escaped(base, escaped)
    elif found.health_failed is not None and not managed:
        base = InstanceStatus(InstanceState.DEGRADED, found.health_failed)
    elif state.exposed is not None and not managed:
        base = attrs.evolve(base, detail=f"{base.detail}; {state.exposed}")
    elif not managed:
        base = _slow(state, base)
    return attrs.evolve(
        base,
        last_probe=found.last_probe,
        restarts=state.restarts,
        supervision=state.supervision,
        ttft_s=found.ttft_s,
        serving=_serving(state, base),
        endpoint=state.setup.endpoint,
        model=state.setup.model,
    )


def idle_status(state: State) -> InstanceStatus:
    """Status while no process runs: Loaded; Exited for an exposure or a tampered model
    (held until reload or re-registration); for a start that failed before a process ran,
    its words (Exited after an earlier exit, else still Loaded); else Exited with the last
    exit's reason, its diagnosis and any survivor of its group."""
    if state.exposed is not None:
        return InstanceStatus(
            InstanceState.EXITED, f"stopped: {state.exposed}", stop_reason="exposure"
        )
    if state.held is not None:
        how = "stopped" if state.last_reason is StopReason.TAMPERED else "not started"
        held = (
            f"{how}: model {state.held.error.model}: {state.held.error.why}; "
            "held until the model is re-registered or the instance reloaded"
        )
        return InstanceStatus(InstanceState.EXITED, held, stop_reason="tampered")
    last = state.last
    if state.start_error is not None:  # not the exit before it (an operator's stop)
        failed = StopReason.STARTUP_FAILURE
        words = f"{_REASON_WORDS[failed]}: {state.start_error}"
        if last is None:  # nothing ever ran: still Loaded, saying why the start failed
            return InstanceStatus(InstanceState.LOADED, words)
        return InstanceStatus(InstanceState.EXITED, words, stop_reason=failed.value)
    if last is None:
        return InstanceStatus(InstanceState.LOADED)
    reason, diagnosis = state.last_reason, state.diagnosis
    detail = _REASON_WORDS.get(reason, "server process exited") if reason else None
    if diagnosis is not None:
        detail = f"{detail}: {diagnosis.describe()}"
    if last.survivors:  # never a clean stop while something of ours still runs
        pids = ", ".join(map(str, last.survivors))
        detail = f"{detail or 'exited'}; but process {pids} (outside its group) survived"
    stop_reason = reason.value if reason else None
    if (state.supervision or "").startswith(f"gave up: {CONFIG_ERROR}"):
        stop_reason = StopReason.CONFIG_ERROR.value  # the same failure twice: fix it
    return InstanceStatus(
        InstanceState.EXITED,
        detail,
        exit_code=last.exit_code,
        stop_reason=stop_reason,
        diagnosis=diagnosis.describe() if diagnosis is not None else None,
        last_lines=state.last_lines,
        signal=last.signal,
    )


def live_overrides(state: State, base: InstanceStatus) -> InstanceStatus:
    """Rules 3 and 4 of the module docstring, on ``base``."""
    found = state.findings
    if found.impostor is not None:
        return InstanceStatus(InstanceState.DEGRADED, found.impostor)
    if found.health_failed is not None:
        return InstanceStatus(InstanceState.DEGRADED, found.health_failed)
    if base.state is not InstanceState.RUNNING or not state.managed:
        return base
    if not found.identity_ok:
        return InstanceStatus(InstanceState.DEGRADED, "starting: confirming the listener is ours")
    if found.first_token != "":
        detail = "starting: waiting for a first token"
        if found.first_token:
            detail = f"starting: the first token failed ({found.first_token})"
        return InstanceStatus(InstanceState.DEGRADED, detail)
    return base


def ready(state: State) -> bool:
    """Whether the live server counts as ready: up, listed, ours, and it answered a token."""
    running, mapped = InstanceState.RUNNING, state.findings.mapped
    return mapped.state is running and live_overrides(state, mapped).state is running


def _serving(state: State, status: InstanceStatus) -> bool:
    """Whether ``status`` is of a server whose completions work: Running; Degraded for
    nothing but slowness (`_slow`); or Degraded around a failed ``/health`` while the
    confirming completion worked (or, pending, the last completion did)."""
    if status.state is InstanceState.RUNNING:
        return True
    found = state.findings
    if status.state is not InstanceState.DEGRADED or not found.ready_once:
        return False
    said = status.detail or ""  # perhaps with a note appended (`_flag_escaped`)
    if found.slow is not None and said.startswith(found.slow):
        return True
    check = found.confirmation
    if check is None or not said.startswith(found.mapped.detail or "\0"):
        return False  # no check under way, or something else (impostor, ...) is wrong
    return check.works or (check.pending and found.completions_worked)


def _unverdicted(state: State, base: InstanceStatus) -> InstanceStatus:
    """A Running server whose probes gave no verdict for `SAY_NO_VERDICT_S` or more says so
    (`no_verdict_words`), with its last answer, not "server up" as if just checked."""
    words = no_verdict_words(state.findings.no_verdict_for_s, base.detail)
    if words is None or base.state is not InstanceState.RUNNING:
        return base
    return attrs.evolve(base, detail=words)


def _slow(state: State, base: InstanceStatus) -> InstanceStatus:
    """A Running server whose last deep health was slow is Degraded (slow); not part of
    `ready`: a slow first token still makes the server ready."""
    slow = state.findings.slow
    if slow is not None and base.state is InstanceState.RUNNING:
        return InstanceStatus(InstanceState.DEGRADED, slow)
    return base


def _flag_escaped(status: InstanceStatus, escaped: tuple[int, ...]) -> InstanceStatus:
    """Say so in the detail when the server left its process group: inferactors then
    tracks it by pid."""
    if not escaped:
        return status
    pids = ", ".join(map(str, escaped))
    note = f"server left its process group; inferactors tracks it by pid ({pids})"
    return attrs.evolve(status, detail=f"{status.detail}; {note}" if status.detail else note)
