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

from .._edges.capture import RunEvidence
from .._edges.process import ManagedProcess
from .._events import StopReason
from .._policy.probe_parse import Loading, ServerReport, Unhealthy, Unreachable, Up
from .._policy.status import map_report
from .._status import InstanceState, InstanceStatus
from .instance_pin import PinHold

UNHEALTHY_KILL_AFTER_S = 3.0
"""How long a ready managed server may stay unhealthy (every probe) before it is killed."""

_REASON_WORDS = {
    StopReason.REQUESTED: "stopped on request",
    StopReason.CRASH: "server process exited",
    StopReason.READINESS_TIMEOUT: "killed: not ready before the readiness deadline",
    StopReason.HEALTH_KILL: "killed: deep health failed",
    StopReason.UNLOAD: "stopped for unload",
    StopReason.SHUTDOWN: "stopped: the runtime shut down",
    StopReason.ERROR: "stopped: the instance crashed (see its InstanceCrashed event)",
    StopReason.TAMPERED: "stopped: a verified model file changed while served",
}


def probe_words(report: ServerReport) -> str:
    """What a probe found, in a few words: ``up``, ``loading``, ``unreachable: why``."""
    health = report.health
    if isinstance(health, Up):
        return "up"
    if isinstance(health, Loading):
        return "loading"
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

    def note_watchdog(self, why: str | None, failures: int) -> bool:
        """Record one watchdog check (``why`` None: it passed); True once ``failures`` checks
        in a row failed and the server must be killed."""
        if why is None:
            self.health_failures, self.health_failed = 0, None
            return False
        self.health_failures += 1
        if self.health_failures < failures:
            return False
        self.health_failed = f"deep health failed {self.health_failures} times: {why}"
        return True

    def note_health(self, report: ServerReport, now: float) -> str | None:
        """Watch a server that was ready for turning unhealthy (not loading: e.g.
        mlx_lm.server whose generation thread died, FC-07); once it has stayed unhealthy for
        `UNHEALTHY_KILL_AFTER_S` seconds return why it must be killed, else None."""
        health = report.health
        if not (self.managed and self.ready_once and isinstance(health, Unhealthy)):
            self.unhealthy_since = None
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
        self.mapped = InstanceStatus(InstanceState.DEGRADED, "starting: not listening yet")

    def exited(self, evidence: RunEvidence) -> StopReason:
        """The current process ended; return why (the pending stop reason, else crash)."""
        reason = self.stop_reason or StopReason.CRASH
        self.process = None
        self.stop_reason = None
        self.last = evidence
        self.last_reason = reason
        self.mapped = self.idle_status()
        return reason

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
        if self.last.survivors:  # never a clean stop while something of ours still runs
            pids = ", ".join(map(str, self.last.survivors))
            detail = f"{detail or 'exited'}; but process {pids} (outside its group) survived"
        return InstanceStatus(
            InstanceState.EXITED,
            detail,
            exit_code=self.last.exit_code,
            stop_reason=reason.value if reason else None,
        )

    def status(self, now: float) -> InstanceStatus:
        """The status to report at trio time ``now``."""
        base = self.mapped if self.process is not None or not self.managed else self.idle_status()
        if self.process is not None:
            base = self._live_overrides(base)
            base = attrs.evolve(base, pid=self.process.pid, uptime_s=now - self.process.started_at)
            base = _flag_escaped(base, self.process.escaped)
        elif self.health_failed is not None and not self.managed:
            base = InstanceStatus(InstanceState.DEGRADED, self.health_failed)
        elif self.exposed is not None and not self.managed:
            base = attrs.evolve(base, detail=f"{base.detail}; {self.exposed}")
        return attrs.evolve(
            base, last_probe=self.last_probe, restarts=self.restarts, supervision=self.supervision
        )

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
