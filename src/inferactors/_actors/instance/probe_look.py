"""What the monitor of one process remembers between probes (`ProbeLook`), and its next delay.

Split from ``instance_probing`` (the monitor's I/O): this is bookkeeping read with the
runtime's clock (``trio.current_time``), no I/O; the schedule's arithmetic is
``_policy.probe_schedule``.
"""

from __future__ import annotations

import attrs
import trio

from ..._edges.process import ManagedProcess
from ..._policy.exposure import Exposure
from ..._policy.health_truth import Confirmation, worth_confirming
from ..._policy.probe_parse import ServerReport, Unreachable, serving
from ..._policy.probe_schedule import RUNNING_PROBE_S, startup_delay

CONFIRM_EVERY_S = 10.0
"""While ``/health`` keeps failing on a server that was Running, the completion that
checks it is sent again at most this often (float seconds; issue 9 item 5)."""

MISBOUND_SCAN_S = 0.5
"""While probes are refused, the socket table is read for a listener on the other address
family at most this often (float seconds): one per-port kernel query, under 1 ms."""

NO_VERDICT_LIMIT = 3
"""Probes in a row that may be passed over for our own late loop (issue 11)."""

ADOPTED_EXPOSURE_S = 5.0
"""An adopted server's port is checked for listeners beyond loopback at its first serving
probe and then at most this often (float seconds): the finding is only reported, never
acted on (FC-15), so a few seconds of lag costs nothing, and a thousand adopted servers
cost 200 per-port queries a second instead of a thousand (issue 11)."""


@attrs.define
class ProbeLook:
    """What the monitor remembers between probes of one process."""

    token_ok: bool
    ready: bool = False
    models: tuple[str, ...] = ()
    confirmation: Confirmation | None = None
    misbound: str | None = None
    scanned_at: float | None = None
    answered: bool = False
    exposure: Exposure | None = None
    exposure_at: float | None = None
    late_in_a_row: int = 0

    def note(self, report: ServerReport) -> None:
        """Remember a serving server's list; a serving ``/health`` ends any confirmation."""
        if serving(report.health):
            self.models, self.confirmation = report.models, None
            self.ready = self.ready or self.token_ok

    def confirm_due(self, process: ManagedProcess | None, report: ServerReport) -> bool:
        """Whether this probe's failed ``/health`` calls for a confirming completion: the
        managed server was Running and the last check is `CONFIRM_EVERY_S` old."""
        if process is None or not self.ready or not worth_confirming(report.health):
            return False
        last = self.confirmation
        return last is None or trio.current_time() - last.at >= CONFIRM_EVERY_S

    def scan_due(self, report: ServerReport) -> bool:
        """Whether a refused probe should read the socket table now (`MISBOUND_SCAN_S`)."""
        if not isinstance(report.health, Unreachable):
            self.scanned_at, self.misbound, self.answered = None, None, True
            return False
        if self.answered:
            return False
        now = trio.current_time()
        if self.scanned_at is not None and now - self.scanned_at < MISBOUND_SCAN_S:
            return False
        self.scanned_at = now
        return True

    def passes_over(self, late: bool) -> bool:
        """Whether to pass over a probe that gave no verdict because our own loop ran late:
        at most `NO_VERDICT_LIMIT` in a row; after that it is judged as the timeout it is,
        so a server that hangs is not hidden by a supervisor that stays overloaded."""
        self.late_in_a_row = self.late_in_a_row + 1 if late else 0
        return late and self.late_in_a_row <= NO_VERDICT_LIMIT

    def exposure_due(self) -> bool:
        """Whether an adopted server's port is due for its exposure check
        (`ADOPTED_EXPOSURE_S`); if so, the check is booked now."""
        now = trio.current_time()
        if self.exposure_at is not None and now - self.exposure_at < ADOPTED_EXPOSURE_S:
            return False
        self.exposure_at = now
        return True

    def next_delay(self, report: ServerReport, previous: float) -> float:
        """Every second once up (or while completions work around a failed ``/health``),
        else doubling from ``previous`` up to the start-up cap (`startup_delay`)."""
        confirmed = self.confirmation is not None and self.confirmation.works
        if (serving(report.health) and self.token_ok) or confirmed:
            return RUNNING_PROBE_S
        return startup_delay(previous)
