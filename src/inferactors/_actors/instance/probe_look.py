"""What the monitor of one process remembers between its probes (`ProbeLook`), and how
often it looks again at what a probe cannot tell: a confirming completion, the socket
table for a misbound listener, an adopted server's exposure. Times are the runtime's
clock (trio time), durations float seconds.
"""

from __future__ import annotations

import attrs
import trio

from ..._edges.process import ManagedProcess
from ..._policy.exposure import Exposure
from ..._policy.health_truth import Confirmation, worth_confirming
from ..._policy.probe_report import ServerReport, Unreachable, serving
from ..._policy.probe_schedule import RUNNING_PROBE_S, startup_delay

CONFIRM_EVERY_S = 10.0
"""While ``/health`` keeps failing on a server that was Running, the completion that
checks it is sent again at most this often (float seconds)."""

MISBOUND_SCAN_S = 0.5
"""While probes are refused, the socket table is read for a listener on the other address
family at most this often (float seconds): one per-port kernel query, under 1 ms."""

ADOPTED_EXPOSURE_S = 30.0
"""An adopted server's port is checked for listeners beyond loopback once in each period of
this length (float seconds), on the server's own phase (`ProbeLook.exposure_due`). The
finding is only reported, never acted on (the server is not ours to stop), so half a
minute of lag costs nothing; each check is a per-port kernel query and a connect on every
local address: at one check per 5 s, from each server's first serving probe, a thousand
adopted servers spent 14% of the supervisor's CPU on them (200 checks a second, and a
thousand at once while they were admitted)."""


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
    exposure_phase: float = 0.0
    """When an adopted server's first exposure check falls, as a fraction of
    `ADOPTED_EXPOSURE_S` after its first serving probe (its probes' phase, `phase_of`)."""
    exposure_next: float | None = None
    stalled: bool = False
    """The monitor's last pause ended more than ``LATE_S`` late (our loop stalled): a
    managed server's exposure is checked again before its next probe is judged."""

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

    def exposure_due(self) -> bool:
        """Whether an adopted server's port is due for its exposure check; if so, the next
        one is booked `ADOPTED_EXPOSURE_S` later. The first falls ``exposure_phase`` of a
        period after the first serving probe (so servers adopted together are checked
        spread out, not all at their admission), then one every period."""
        now = trio.current_time()
        if self.exposure_next is None:
            self.exposure_next = now + self.exposure_phase * ADOPTED_EXPOSURE_S
        if now < self.exposure_next:
            return False
        self.exposure_next = now + ADOPTED_EXPOSURE_S
        return True

    def next_delay(self, report: ServerReport, previous: float) -> float:
        """Every second once up (or while completions work around a failed ``/health``),
        else doubling from ``previous`` up to the start-up cap (`startup_delay`)."""
        confirmed = self.confirmation is not None and self.confirmation.works
        if (serving(report.health) and self.token_ok) or confirmed:
            return RUNNING_PROBE_S
        return startup_delay(previous)
