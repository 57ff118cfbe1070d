"""Tell systemd how the supervisor stands, through a `Notifier`.

`serve_notify` runs beside the `Fleet` in ``inferactors run``:

- ``READY=1`` once `Fleet.settled` is set (every instance reached its first settled state);
- until then, ``EXTEND_TIMEOUT_USEC`` of `EXTEND_S` every `EXTEND_EVERY_S` (from the
  start): models that take minutes to load do not make systemd kill a supervisor whose
  start is going on (``TimeoutStartSec``); a start that hangs still ends, as each
  instance's readiness deadline settles it;
- ``STATUS=3 of 4 running; 1 restarting`` (`status_line`) whenever that line changes,
  looked at whenever a member's cached view changes (`Fleet.until_changed`: read again on
  each of its events, so a crash shows at once, not at the respawn) and at least every
  `STATUS_EVERY_S`;
- ``WATCHDOG=1`` every ``WATCHDOG_USEC/2`` while `Fleet.alive` answers within half of that
  period; none while it does not, so systemd's watchdog restarts a stuck supervisor;

and `ServiceNotes.on_note` (a `Fleet.on_lifecycle` hook) turns the fleet's milestones into
``RELOADING=1`` + ``MONOTONIC_USEC=<CLOCK_MONOTONIC µs>`` when a reload begins (before
its run file is read), ``READY=1`` when it ends (with ``STATUS=reload failed: ...`` when
it was refused, TOML syntax errors included), and ``STOPPING=1`` when the fleet closes.

Without ``NOTIFY_SOCKET`` the notifier is a `NullNotifier` and all of this costs a cached
status line a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import trio

from .._edges.sd_notify import Notifier, monotonic_usec
from .._policy.service_status import status_line
from .views import InstanceView, Lifecycle, LifecycleNote

MIN_WATCHDOG_S = 1.0
"""The shortest ``WatchdogSec`` honoured: pings every half of it, each after the actor trees
answered within a quarter; below 1 s a spawn or a burst of output can hold the loop that
long (``bench/bench_log_flood.py``), and systemd would kill a working supervisor."""
WARN_WATCHDOG_S = 10.0
"""Below this ``WatchdogSec``, a heavily loaded machine may make a ping late: said at start."""
EXTEND_S = 30.0
"""How far each ``EXTEND_TIMEOUT_USEC`` moves systemd's start timeout from the moment it
is received, float seconds."""
EXTEND_EVERY_S = 10.0
"""How often ``EXTEND_TIMEOUT_USEC`` is sent while the fleet is not settled: three sends
fit in one `EXTEND_S`, so one late send on a loaded machine is harmless."""
STATUS_EVERY_S = 1.0
"""The longest a changed ``STATUS=`` line waits without a view change, float seconds."""
STATUS_MAX_CHARS = 200
"""A failed reload's ``STATUS=`` text is cut to this many characters."""


class NotifiedFleet(Protocol):
    """What the notifier reads of a `Fleet`: cached views, settledness, liveness, changes."""

    @property
    def settled(self) -> trio.Event: ...
    def views(self) -> tuple[InstanceView, ...]: ...
    async def alive(self, deadline_s: float) -> bool: ...
    async def until_changed(self) -> None: ...


def watchdog_problem(period_s: float | None) -> tuple[bool, str] | None:
    """What is wrong with pinging every ``period_s`` (half of systemd's ``WatchdogSec``):
    ``(True, why)`` when it cannot be honoured (the supervisor refuses to start), ``(False,
    why)`` when it may be missed under load (a warning), None when it is fine or off."""
    if period_s is None:
        return None
    watchdog_s = period_s * 2
    if watchdog_s < MIN_WATCHDOG_S:
        return True, (
            f"WatchdogSec={watchdog_s:g}s cannot be honoured: pings every {period_s:g} s, each "
            f"after every actor tree answered within {period_s / 2:g} s; use at least "
            f"{MIN_WATCHDOG_S:g}s (30s in the shipped unit)"
        )
    if watchdog_s < WARN_WATCHDOG_S:
        return False, (
            f"WatchdogSec={watchdog_s:g}s is short: on a loaded machine a ping may come late "
            f"and systemd would restart a working supervisor; {WARN_WATCHDOG_S:g}s or more "
            "is safer"
        )
    return None


def fleet_status(views: Sequence[InstanceView]) -> str:
    """The ``STATUS=`` text for these views (`status_line`)."""
    return status_line((view.status, view.refused is not None) for view in views)


@attrs.define(eq=False)
class ServiceNotes:
    """The fleet's milestones as notifications; `on_note` is sync (a callback is fine)."""

    notifier: Notifier
    fleet: NotifiedFleet
    _last_status: str | None = None

    def on_note(self, note: LifecycleNote) -> None:
        """Notify for one milestone (`Fleet.on_lifecycle`): RELOADING=1 with
        MONOTONIC_USEC, READY=1 after a reload (its STATUS= names the failure of a failed
        one), STOPPING=1. SETTLED sends nothing here:
        `serve_notify` waits on `Fleet.settled` itself, so a READY=1 is never missed by a
        hook registered late, nor sent twice."""
        match note.kind:
            case Lifecycle.SETTLED:
                pass
            case Lifecycle.RELOADING:
                self.notifier.notify(
                    RELOADING=1, MONOTONIC_USEC=monotonic_usec(), STATUS="reloading"
                )
            case Lifecycle.RELOADED if note.failed:  # shown until the line changes
                failed = f"{self._status()}; {note.detail}"
                self.notifier.notify(READY=1, STATUS=failed[:STATUS_MAX_CHARS])
            case Lifecycle.RELOADED:
                self.notifier.notify(READY=1, STATUS=self._status())
            case Lifecycle.STOPPING:
                self.notifier.notify(STOPPING=1, STATUS="stopping")

    def ready(self) -> None:
        """READY=1 with the current status line."""
        self.notifier.notify(READY=1, STATUS=self._status())

    def status_if_changed(self) -> None:
        """STATUS= the current line, unless it was the last one sent."""
        line = fleet_status(self.fleet.views())
        if line != self._last_status:
            self._last_status = line
            self.notifier.notify(STATUS=line)

    def _status(self) -> str:
        self._last_status = fleet_status(self.fleet.views())
        return self._last_status


async def serve_notify(
    notes: ServiceNotes,
    watchdog_s: float | None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """EXTEND_TIMEOUT_USEC until settled, READY=1 at settle, STATUS= lines and WATCHDOG=1
    pings every ``watchdog_s`` (float seconds, None: no watchdog) until cancelled.
    Cancelling it sends nothing more."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_ready_when_settled, notes)
        nursery.start_soon(_extend_until_settled, notes)
        nursery.start_soon(_follow_status, notes)
        if watchdog_s is not None:
            nursery.start_soon(_watchdog, notes.fleet, notes.notifier, watchdog_s)
        task_status.started()


async def _ready_when_settled(notes: ServiceNotes) -> None:
    await notes.fleet.settled.wait()
    notes.ready()


async def _extend_until_settled(notes: ServiceNotes) -> None:
    """EXTEND_TIMEOUT_USEC every `EXTEND_EVERY_S` until the fleet settles (none after)."""
    settled = notes.fleet.settled
    while not settled.is_set():
        notes.notifier.notify(EXTEND_TIMEOUT_USEC=round(EXTEND_S * 1_000_000))
        with trio.move_on_after(EXTEND_EVERY_S):
            await settled.wait()


async def _follow_status(notes: ServiceNotes) -> None:
    while True:
        notes.status_if_changed()
        with trio.move_on_after(STATUS_EVERY_S):
            await notes.fleet.until_changed()


async def _watchdog(fleet: NotifiedFleet, notifier: Notifier, period_s: float) -> None:
    """WATCHDOG=1 every ``period_s`` when every actor tree answered within half of it:
    a healthy supervisor's pings are at most 1.5 periods (0.75 WatchdogSec) apart."""
    while True:
        began = trio.current_time()
        if await fleet.alive(period_s / 2):
            notifier.notify(WATCHDOG=1)
        await trio.sleep_until(began + period_s)
