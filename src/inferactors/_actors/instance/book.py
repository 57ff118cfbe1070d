"""An instance's bookkeeping and how it becomes a status (pure; no trio, no I/O).

`InstanceBook` holds what one instance actor knows; the actor (``_instance.py``) is its
only writer. The status rules follow seed-behaviour.md section 4 (``status``) and add what
issue 3 asks for: the stop reason apart from the exit status (FC-22), the supervisor's
note, loading progress (time since spawn and the last probe), an exposure stop that holds
until reload (checklist 59), an impostor on our port (FC-14) and a failing watchdog; and
issue 8's hold after a spawn refused for a tampered model (stop reason ``tampered``).
"""

from __future__ import annotations

import attrs

from ..._edges.capture import RunEvidence
from ..._edges.process import ManagedProcess
from ..._events import Diagnosis, FaultKind, ProcessExited, StopReason
from ..._policy.health_truth import (
    Confirmation,
    confirmed_status,
    refused_detail,
    slow_detail,
    worth_confirming,
)
from ..._policy.probe_parse import Busy, Loading, ServerReport, Unhealthy, Unreachable, Up, serving
from ..._policy.restart import CONFIG_ERROR
from ..._policy.startup_fault import read_exit
from ..._policy.status import map_report
from ..._status import InstanceState, InstanceStatus
from .pins import PinHold

UNHEALTHY_KILL_AFTER_S = 3.0
"""How long a ready managed server may stay unhealthy (every probe) before it is killed."""

MISBOUND_SETTLE_S = 1.0
"""How long a starting managed server must keep listening only on the other address family
(two socket-table reads at least) before it is stopped as a configuration error: a server
that binds ``::1`` a moment before 127.0.0.1 is not one (float seconds)."""

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


@attrs.define
class InstanceBook:
    """Everything one instance actor knows about its instance.

    Attributes are the actor's private state; see the module docstring.
    """

    managed: bool
    process: ManagedProcess | None = None
    starting: bool = False
    wanted: bool = False
    stop_reason: StopReason | None = None
    last: RunEvidence | None = None
    last_reason: StopReason | None = None
    exposed: str | None = None
    tampered: PinHold | None = None
    mapped: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)
    last_probe: str | None = None
    supervision: str | None = None
    restarts: int = 0
    impostor: str | None = None
    identity_ok: bool = False
    first_token: str | None = None
    ready_once: bool = False
    health_failures: int = 0
    health_failed: str | None = None
    unhealthy_since: float | None = None
    answered: bool = False
    ttft_s: float | None = None
    slow: str | None = None
    confirmation: Confirmation | None = None
    misbound: str | None = None
    diagnosis: Diagnosis | None = None
    last_lines: tuple[str, ...] = ()
    refused: str | None = None
    misbound_since: float | None = None
    live_fault: Diagnosis | None = None
    completions_worked: bool = False

    def note_identity(self, owner_ok: bool | None, owner_pid: int | None, port: int) -> str | None:
        """Record whether our port's listener is ours; return the impostor detail the first
        time it is not (FC-14), else None."""
        if owner_ok is False and self.impostor is None:
            self.impostor = f"impostor: port {port} is held by pid {owner_pid}, not our server"
            return self.impostor
        if owner_ok is True:
            self.identity_ok, self.impostor = True, None
        return None

    def note_report(
        self,
        report: ServerReport,
        listed_names: tuple[str, ...],
        first_token: str | None,
        now: float,
        stopped: bool = False,
    ) -> None:
        """Record a probe report at trio time ``now`` (and the first-token result, when it
        carries one); ``stopped``: our silent process is stopped by a signal."""
        self.last_probe = probe_words(report)
        if first_token is not None:
            self.first_token = first_token
        if not isinstance(report.health, Unreachable):
            self.answered = True
        alive = self.process is not None and self.process.running
        self.mapped = map_report(
            report,
            model=listed_names,
            alive=alive or not self.managed,
            adopted=not self.managed,
            answered=self.answered,
            stopped=stopped,
        )

    def note_truth(
        self,
        report: ServerReport,
        confirmation: Confirmation | None,
        misbound: str | None,
        *,
        key_sent: bool = False,
    ) -> None:
        """After `note_report`: what the probe's truth checks add (issue 9 item 5). A
        completion that works around a failed ``/health`` makes it Degraded "...; completions
        work" (pending: "...; checking ..."), one that failed too says so; ``misbound``, the
        port listening only on the other address family, and a request refused for want of
        an API key (``report.refused``; ``key_sent``: we sent one) are said at once."""
        if serving(report.health) or isinstance(report.health, Loading):
            self.confirmation = None
        elif confirmation is not None:
            self.confirmation = confirmation
        if self.confirmation is not None and not self.confirmation.pending:
            self.completions_worked = self.confirmation.works
        truth = confirmed_status(report.health, self.confirmation)
        if truth is not None:
            self.mapped = truth
        elif self.confirmation is not None and worth_confirming(report.health):
            detail = f"{self.mapped.detail}; completions fail too ({self.confirmation.why})"
            self.mapped = attrs.evolve(self.mapped, detail=detail)
        if not isinstance(report.health, Unreachable):
            self.misbound = None
        elif misbound is not None:  # "": looked, nothing wrong; None: the verdict stands
            self.misbound = misbound or None
        if self.misbound is not None:
            self.mapped = InstanceStatus(InstanceState.DEGRADED, self.misbound)
        refused = report.refused
        self.refused = None if refused is None else refused_detail(refused, key_sent=key_sent)
        if self.refused is not None:
            self.mapped = InstanceStatus(InstanceState.DEGRADED, self.refused)

    def config_fault(self, now: float) -> Diagnosis | None:
        """The configuration error a starting managed server shows while it lives, at trio
        time ``now``: it refuses our requests (at once), or it has listened only on the
        other address family for `MISBOUND_SETTLE_S`; else None. Kept in `live_fault`, so
        its exit carries it (issue 9: a config-error, not a crash loop)."""
        if not self.managed or self.process is None or self.ready_once:
            return None
        if self.misbound is None:
            self.misbound_since = None
        elif self.misbound_since is None:
            self.misbound_since = now
        if self.refused is not None:
            self.live_fault = Diagnosis(FaultKind.REFUSES_REQUESTS, self.refused)
        elif self.misbound is not None and now - (self.misbound_since or now) >= MISBOUND_SETTLE_S:
            self.live_fault = Diagnosis(FaultKind.WRONG_ADDRESS_FAMILY, self.misbound)
        return self.live_fault

    def note_passed(self, ttft_s: float, slow_after_s: float) -> None:
        """A deep health passed with time to first token ``ttft_s`` (float seconds); slower
        than ``slow_after_s`` leaves the server Degraded (slow) until a quick one."""
        self.ttft_s = ttft_s
        self.slow = slow_detail(ttft_s, slow_after_s)
        self.completions_worked = True

    def note_watchdog(self, why: str | None, failures: int) -> bool:
        """Record one watchdog check (``why`` None: it passed); True once ``failures`` checks
        in a row failed and the server must be killed."""
        if why is None:
            self.health_failures, self.health_failed = 0, None
            return False
        self.health_failures += 1
        self.completions_worked = False
        if self.health_failures < failures:
            return False
        self.health_failed = f"deep health failed {self.health_failures} times: {why}"
        return True

    def note_health(self, report: ServerReport, now: float) -> str | None:
        """Watch a server that was ready for turning unhealthy (not loading: e.g.
        mlx_lm.server whose generation thread died, FC-07); once it has stayed unhealthy for
        `UNHEALTHY_KILL_AFTER_S` seconds return why it must be killed, else None."""
        health = report.health
        confirmed = self.confirmation is not None and self.confirmation.why is None
        if not (self.managed and self.ready_once and isinstance(health, Unhealthy)) or confirmed:
            self.unhealthy_since = None  # completions work (or are being checked): not killed
            return None
        if self.unhealthy_since is None:
            self.unhealthy_since = now
        lasted = now - self.unhealthy_since
        if lasted < UNHEALTHY_KILL_AFTER_S:
            return None
        self.health_failed = f"unhealthy for {lasted:.1f} s: {health.why}"
        return self.health_failed

    def spawned(self, process: ManagedProcess) -> None:
        """A new process runs: forget everything about the previous one."""
        self.process = process
        self.tampered = None  # its model passed its pins
        self.starting = False
        self.wanted = True
        self.stop_reason = None
        self.impostor = None
        self.identity_ok = False
        self.first_token = None
        self.ready_once = False
        self.health_failures = 0
        self.health_failed = None
        self.unhealthy_since = None
        self.answered = False
        self.last_probe = None
        self.ttft_s, self.slow, self.confirmation, self.misbound = None, None, None, None
        self.refused, self.misbound_since, self.live_fault = None, None, None
        self.completions_worked = False
        self.mapped = InstanceStatus(InstanceState.DEGRADED, "starting: not listening yet")

    def exited(self, evidence: RunEvidence) -> StopReason:
        """The current process ended; return why: the pending stop reason, else crash, or
        start-up failure when it never ran and its output says why (`read_exit`)."""
        live = self.process.lines.fatal if self.process is not None else None
        live = live or self.live_fault
        reading = read_exit(
            self.stop_reason or StopReason.CRASH,
            ever_ready=self.ready_once,
            live=live,
            stdout=evidence.stdout_tail,
            stderr=evidence.stderr_tail,
        )
        reason = reading.reason
        self.diagnosis, self.last_lines = reading.diagnosis, reading.last_lines
        self.process = None
        self.stop_reason = None
        self.last = evidence
        self.last_reason = reason
        self.mapped = self.idle_status()
        return reason

    def exit_event(
        self, instance_id: str, evidence: RunEvidence, reason: StopReason, now: float
    ) -> ProcessExited:
        """The `ProcessExited` of the exit just recorded by `exited`, with its words."""
        return ProcessExited(
            instance_id,
            evidence.pid,
            evidence.exit_code,
            evidence.signal,
            reason,
            now,
            survivors=evidence.survivors,
            diagnosis=self.diagnosis,
            last_lines=self.last_lines,
        )

    def idle_status(self) -> InstanceStatus:
        """Status while no process runs: Loaded, or Exited with why (checklist 50, 52, 59)."""
        if self.exposed is not None:
            return InstanceStatus(
                InstanceState.EXITED, f"stopped: {self.exposed}", stop_reason="exposure"
            )
        if self.tampered is not None:
            how = "stopped" if self.last_reason is StopReason.TAMPERED else "not started"
            held = (
                f"{how}: model {self.tampered.error.model}: {self.tampered.error.why}; "
                "held until the model is re-registered or the instance reloaded"
            )
            return InstanceStatus(InstanceState.EXITED, held, stop_reason="tampered")
        if self.last is None:
            return InstanceStatus(InstanceState.LOADED)
        reason = self.last_reason
        detail = _REASON_WORDS.get(reason, "server process exited") if reason else None
        if self.diagnosis is not None:
            detail = f"{detail}: {self.diagnosis.describe()}"
        if self.last.survivors:  # never a clean stop while something of ours still runs
            pids = ", ".join(map(str, self.last.survivors))
            detail = f"{detail or 'exited'}; but process {pids} (outside its group) survived"
        stop_reason = reason.value if reason else None
        if (self.supervision or "").startswith(f"gave up: {CONFIG_ERROR}"):
            stop_reason = StopReason.CONFIG_ERROR.value  # the same failure twice: fix it
        return InstanceStatus(
            InstanceState.EXITED,
            detail,
            exit_code=self.last.exit_code,
            stop_reason=stop_reason,
            diagnosis=self.diagnosis.describe() if self.diagnosis is not None else None,
            last_lines=self.last_lines,
        )

    def status(self, now: float) -> InstanceStatus:
        """The status to report at trio time ``now``."""
        base = self.mapped if self.process is not None or not self.managed else self.idle_status()
        if self.process is not None:
            base = self._slow(self._live_overrides(base))
            base = attrs.evolve(base, pid=self.process.pid, uptime_s=now - self.process.started_at)
            base = _flag_escaped(base, self.process.escaped)
        elif self.health_failed is not None and not self.managed:
            base = InstanceStatus(InstanceState.DEGRADED, self.health_failed)
        elif self.exposed is not None and not self.managed:
            base = attrs.evolve(base, detail=f"{base.detail}; {self.exposed}")
        elif not self.managed:
            base = self._slow(base)
        return attrs.evolve(
            base,
            last_probe=self.last_probe,
            restarts=self.restarts,
            supervision=self.supervision,
            ttft_s=self.ttft_s,
            serving=self._serving(base),
        )

    def _serving(self, status: InstanceStatus) -> bool:
        """Whether ``status`` is of a server whose completions work (issue 9): Running;
        Degraded for nothing but slowness (`_slow`); or Degraded around a failed ``/health``
        while the confirming completion worked (or, pending, the last completion did)."""
        if status.state is InstanceState.RUNNING:
            return True
        if status.state is not InstanceState.DEGRADED or not self.ready_once:
            return False
        said = status.detail or ""  # perhaps with a note appended (`_flag_escaped`)
        if self.slow is not None and said.startswith(self.slow):
            return True
        check = self.confirmation
        if check is None or not said.startswith(self.mapped.detail or "\0"):
            return False  # no check under way, or something else (impostor, ...) is wrong
        return check.works or (check.pending and self.completions_worked)

    def _slow(self, base: InstanceStatus) -> InstanceStatus:
        """A Running server whose last deep health was slow is Degraded (slow); not part of
        `ready`: a slow first token still makes the server ready."""
        if self.slow is not None and base.state is InstanceState.RUNNING:
            return InstanceStatus(InstanceState.DEGRADED, self.slow)
        return base

    def _live_overrides(self, base: InstanceStatus) -> InstanceStatus:
        if self.impostor is not None:
            return InstanceStatus(InstanceState.DEGRADED, self.impostor)
        if self.health_failed is not None:
            return InstanceStatus(InstanceState.DEGRADED, self.health_failed)
        if base.state is InstanceState.RUNNING and self.managed and not self.identity_ok:
            return InstanceStatus(
                InstanceState.DEGRADED, "starting: confirming the listener is ours"
            )
        if base.state is InstanceState.RUNNING and self.managed and self.first_token != "":
            detail = "starting: waiting for a first token"
            if self.first_token:
                detail = f"starting: the first token failed ({self.first_token})"
            return InstanceStatus(InstanceState.DEGRADED, detail)
        return base

    @property
    def ready(self) -> bool:
        """Whether the live server counts as ready: up, listed, ours, and it answered a token."""
        running = InstanceState.RUNNING
        return self.mapped.state is running and self._live_overrides(self.mapped).state is running


def _flag_escaped(status: InstanceStatus, escaped: tuple[int, ...]) -> InstanceStatus:
    """Say so in the detail when the server left its process group (issue 8 item 8)."""
    if not escaped:
        return status
    pids = ", ".join(map(str, escaped))
    note = f"server left its process group; inferactors tracks it by pid ({pids})"
    return attrs.evolve(status, detail=f"{status.detail}; {note}" if status.detail else note)
