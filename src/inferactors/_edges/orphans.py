"""No orphans: reap the managed servers an earlier life of a supervisor left behind.

A killed supervisor must not leave llama-server holding the GPU and the port (llama-swap
issues #100, #138, #159). The parent-death signal (``spawn.py``) kills the leader when
the supervisor dies; this module covers what it cannot: a platform without it, a grandchild
of a forking wrapper (the signal is not inherited across fork), a server that cleared it.

- When a managed server starts, a record (``server.json``) is written into its instance
  directory; the records, their file I/O and the rule for trusting them are in
  ``orphan_record.py``.
- At start-up `reap_orphans` reads every ``data_root/*/server.json`` and takes down (SIGTERM
  to the group, ``grace_s``, SIGKILL to the group) each recorded server that is still the
  same process and whose supervisor is gone, then removes the stale records.

Identity (``proctable.py``): a process is "the same" only when the boot and its start are
the same as recorded; a recycled pid is never signalled. When the leader is gone but members
of its group live on (a forking wrapper's server), the group is ours only
if one of them is a member the record lists with the same start (the runtime refreshes the
list every second, ``refresh_record``); otherwise they are reported and left alone.
Descendants that left the group (a ``setsid`` wrapper's server) are recorded by pid and
start too, and each one that is still the recorded process is stopped with the group,
through a pidfd opened before its start was checked (never a reused pid).

All functions are synchronous (the runtime runs them in a thread at start-up); the process
table and the clock sit behind `ProcessTable`, so tests can swap them.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from .escapees import close_all, live, open_recorded, signal_all
from .orphan_record import OrphanOutcome, OrphanRecord, ReapedOrphan, scan_records
from .proctable import ProcessStart, ProcessTable, SystemProcessTable

KILL_BOUND_S = 2.0
"""How long a SIGKILLed group gets to disappear before it is reported as surviving."""

POLL_S = 0.02
"""How often the process table is read while waiting for a group to go (seconds)."""


def reap_orphans(
    data_root: Path, *, grace_s: float = 3.0, table: ProcessTable | None = None
) -> list[ReapedOrphan]:
    """Take down the servers an earlier life of a supervisor left behind.

    For each record under ``data_root``: a server that is gone, or whose pid now belongs to
    another process, is STALE (nothing signalled, record removed). One that is still the
    same process and whose supervisor is alive (another supervisor, or this very one) is
    ALIVE and left alone. Otherwise its supervisor is gone (or is an earlier process with
    our pid): SIGTERM its group, wait up to ``grace_s`` for the group to go, SIGKILL it,
    wait up to `KILL_BOUND_S`; KILLED, and the record is removed. Blocks for up to
    ``grace_s + KILL_BOUND_S`` per orphan: call it from a thread in async code.

    Args:
        data_root: The directory holding the instance directories.
        grace_s: Seconds an orphan gets between SIGTERM and SIGKILL.
        table: The process table and clock (tests pass a fake); the real one by default.

    Returns:
        One `ReapedOrphan` per record found, in path order.
    """
    table = table if table is not None else SystemProcessTable()
    reports = []
    for found in scan_records(data_root):
        if isinstance(found, ReapedOrphan):
            reports.append(found)
            continue
        report = _reap_one(found, table, grace_s)
        if report.outcome in (OrphanOutcome.KILLED, OrphanOutcome.STALE):
            found.path.unlink(missing_ok=True)
        reports.append(report)
    return reports


def _reap_one(record: OrphanRecord, table: ProcessTable, grace_s: float) -> ReapedOrphan:
    def report(outcome: OrphanOutcome, detail: str) -> ReapedOrphan:
        program = record.argv[0] if record.argv else None
        return ReapedOrphan(
            record.path, record.pid, record.port, outcome, detail, record.pgid, program
        )

    gone = _why_not_running(record, table)
    same_boot = record.boot_id == table.boot_id()
    escaped = open_recorded(table, record.escaped, record.boot_time) if same_boot else {}
    try:
        if gone is not None and not escaped:
            return report(*gone)
        owner = _live_supervisor(record, table)
        if owner is not None:
            return report(OrphanOutcome.ALIVE, owner)
        pgid = record.pgid if gone is None else None
        ended_by = _stop_group(table, pgid, grace_s, escaped)
    finally:
        close_all(escaped)
    what = f"group {record.pgid}" if gone is None else "its escaped descendants"
    if ended_by is None:
        return report(OrphanOutcome.ALIVE, f"{what} survived SIGKILL")
    if gone is not None and gone[0] is OrphanOutcome.ALIVE:  # the group stays unproven
        return report(OrphanOutcome.ALIVE, f"{gone[1]}; {what} ended by {ended_by}")
    return report(OrphanOutcome.KILLED, f"orphaned; {what} ended by {ended_by}")


def _why_not_running(record: OrphanRecord, table: ProcessTable) -> tuple[OrphanOutcome, str] | None:
    """None when the recorded server is verifiably alive; else the outcome and why."""
    if record.boot_id != table.boot_id():
        return OrphanOutcome.STALE, "recorded before the last reboot"
    leader = table.identify(record.pid)
    if leader is not None and not _is_recorded(leader, record):
        return OrphanOutcome.STALE, f"pid {record.pid} now belongs to another process"
    members = table.live_members(record.pgid)
    if not members:
        return OrphanOutcome.STALE, f"server {record.pid} has exited"
    if leader is None and _recorded_member(record, members, table) is None:
        listed = ", ".join(map(str, members))
        return OrphanOutcome.ALIVE, (
            f"its leader {record.pid} is gone but process group {record.pgid} still holds "
            f"{listed}; not signalled, since the group cannot be proven to be the server's"
        )
    return None


def _recorded_member(
    record: OrphanRecord, members: tuple[int, ...], table: ProcessTable
) -> int | None:
    """A live member of the group that the record lists with the same start, or None.

    One is enough: while any process of a group lives, its id cannot be handed to a new
    group, so a recorded member still in it proves the group is the one we started.
    """
    recorded = dict(record.members)
    for pid in members:
        if pid not in recorded:
            continue
        process = table.identify(pid)
        started = process is not None and process.started_as(recorded[pid], record.boot_time)
        if started and process is not None and process.pgid == record.pgid:
            return pid
    return None


def _is_recorded(process: ProcessStart, record: OrphanRecord) -> bool:
    started = process.started_as(record.create_time, record.boot_time)
    return started and process.pgid == record.pgid


def _live_supervisor(record: OrphanRecord, table: ProcessTable) -> str | None:
    """Who still supervises the server, or None when its supervisor is gone."""
    supervisor = table.identify(record.supervisor_pid)
    if supervisor is None or supervisor.zombie:
        return None
    if not supervisor.started_as(record.supervisor_create_time, record.boot_time):
        return None  # an earlier supervisor whose pid was reused (ours included)
    if supervisor.pid == os.getpid():
        return "started by this supervisor"
    return f"its supervisor, process {supervisor.pid}, is still running"


def _stop_group(
    table: ProcessTable, pgid: int | None, grace_s: float, escaped: dict[int, int]
) -> str | None:
    """SIGTERM, grace, SIGKILL, bounded wait, for the group (when ``pgid`` is given) and
    the recorded escapees (pidfds); the signal that ended them, or None if any lives."""
    for signum, bound in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_BOUND_S)):
        follow = (signal.SIGCONT,) if signum == signal.SIGTERM else ()  # as systemd does
        for sent in (signum, *follow):  # a stopped orphan must run to handle its SIGTERM
            if pgid is not None:
                table.signal_group(pgid, sent)
            signal_all(escaped, sent)
        if _wait_empty(table, pgid, bound, escaped):
            return "SIGTERM" if signum == signal.SIGTERM else f"SIGKILL after {grace_s:g} s"
    return None


def _wait_empty(
    table: ProcessTable, pgid: int | None, timeout_s: float, escaped: dict[int, int]
) -> bool:
    deadline = table.monotonic() + timeout_s
    while (pgid is not None and table.live_members(pgid)) or live(escaped):
        remaining = deadline - table.monotonic()
        if remaining <= 0:
            return False
        table.sleep(min(POLL_S, remaining))
    return True
