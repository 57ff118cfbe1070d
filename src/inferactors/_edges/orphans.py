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
Descendants that left the group (a ``setsid`` wrapper's server, a daemonized grandchild)
are recorded by pid and start too, and each one that is still the recorded process is
stopped with the group, through a pidfd opened before its start was checked (never a
reused pid).

Where the host delegates cgroups (``cgroups.py``), the record names the server's cgroup,
and whatever is still in it is stopped with the group (each member through a pidfd checked
to be in that cgroup, then ``cgroup.kill``): it is ours by place. Then every cgroup of this
``data_root`` that a life now over made and that still holds a process
(`CgroupTree.left_behind`: a server whose record was never written) is stopped too, and
reported by its cgroup's path.

All functions are synchronous (the runtime runs them in a thread at start-up); the process
table and the clock sit behind `ProcessTable`, so tests can swap them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import attrs
import psutil

from .capture import outside_words
from .cgroups import CgroupTree, ServerCgroup, recorded_cgroup, server_tree
from .escapees import close_all, live, open_recorded, signal_all
from .orphan_record import OrphanRecord, scan_records
from .orphan_report import OrphanOutcome, ReapedOrphan
from .proctable import ProcessStart, ProcessTable, SystemProcessTable

KILL_BOUND_S = 2.0
"""How long a SIGKILLed group gets to disappear before it is reported as surviving."""

POLL_S = 0.02
"""How often the process table is read while waiting for a group to go (seconds)."""


def reap_orphans(
    data_root: Path,
    *,
    grace_s: float = 3.0,
    table: ProcessTable | None = None,
    cgroups: Callable[[], CgroupTree | None] = server_tree,
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
        cgroups: This process's cgroup tree, searched for the cgroups of ``data_root``
            left by lives now over (None: no tree); the delegated one by default.

    Returns:
        One `ReapedOrphan` per record found, in path order; then one per cgroup left
        without a record, in path order.
    """
    table = table if table is not None else SystemProcessTable()
    reports, recorded = [], set()
    for found in scan_records(data_root):
        if isinstance(found, ReapedOrphan):
            reports.append(found)
            continue
        recorded.add(found.cgroup)
        report = _reap_one(found, table, grace_s, data_root)
        if report.outcome in (OrphanOutcome.KILLED, OrphanOutcome.STALE):
            found.path.unlink(missing_ok=True)
        reports.append(report)
    tree = cgroups()
    if tree is not None:
        for cgroup in tree.left_behind(data_root):
            if str(cgroup.path) not in recorded:  # a record's cgroup was its record's to say
                reports.append(_reap_cgroup(cgroup, table, grace_s))
    return reports


def _reap_one(
    record: OrphanRecord, table: ProcessTable, grace_s: float, data_root: Path
) -> ReapedOrphan:
    def report(outcome: OrphanOutcome, detail: str) -> ReapedOrphan:
        program = record.argv[0] if record.argv else None
        return ReapedOrphan(
            record.path, record.pid, record.port, outcome, detail, record.pgid, program
        )

    gone = _why_not_running(record, table)
    if gone is None and record.pgid == os.getpgrp():  # never our own group: not a server's
        gone = OrphanOutcome.STALE, f"process group {record.pgid} is this supervisor's own"
    same_boot = record.boot_id == table.boot_id()
    escaped = open_recorded(table, record.escaped, record.boot_time) if same_boot else {}
    cgroup = _recorded_cgroup(record, data_root) if same_boot else None
    held = cgroup is not None and bool(cgroup.members())
    try:
        if gone is not None and not escaped and not held:
            if cgroup is not None:
                cgroup.discard()
            return report(*gone)
        owner = _live_supervisor(record, table)
        if owner is not None:
            return report(OrphanOutcome.ALIVE, owner)
        pgid = record.pgid if gone is None else None
        stop = _stop_group(table, pgid, grace_s, escaped, cgroup)
    finally:
        close_all(escaped)
    what = f"group {record.pgid}" if gone is None else "its escaped descendants"
    if stop.ended_by is None:
        return report(OrphanOutcome.ALIVE, f"{what} survived SIGKILL{stop.words()}")
    if cgroup is not None:
        cgroup.discard()
    if gone is not None and gone[0] is OrphanOutcome.ALIVE:  # the group stays unproven
        return report(OrphanOutcome.ALIVE, f"{gone[1]}; {what} ended by {stop.ended_by}")
    detail = f"orphaned; {what} ended by {stop.ended_by}{stop.words()}"
    return report(OrphanOutcome.KILLED, detail)


def _recorded_cgroup(record: OrphanRecord, data_root: Path) -> ServerCgroup | None:
    """The record's cgroup, if it names one we would make for ``data_root``."""
    return None if record.cgroup is None else recorded_cgroup(record.cgroup, data_root)


def _reap_cgroup(cgroup: ServerCgroup, table: ProcessTable, grace_s: float) -> ReapedOrphan:
    """Stop what a cgroup of a life now over holds though no record names it."""
    held = cgroup.members()
    first = held[0] if held else None
    program = _program(first) if first is not None else None
    stop = _stop_group(table, None, grace_s, {}, cgroup)
    listed = ", ".join(map(str, held))
    what = f"the cgroup {cgroup.name} of an earlier life, with no record, held {listed}"
    if stop.ended_by is None:
        detail = f"{what}; it survived SIGKILL{stop.words('in that cgroup')}"
        return ReapedOrphan(cgroup.path, first, None, OrphanOutcome.ALIVE, detail, None, program)
    cgroup.discard()
    detail = f"{what}; ended by {stop.ended_by}{stop.words('in that cgroup')}"
    return ReapedOrphan(cgroup.path, first, None, OrphanOutcome.KILLED, detail, None, program)


def _program(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


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


@attrs.frozen
class _Stopped:
    """How `_stop_group` ended: the signal that did (None: something survived SIGKILL),
    and the processes outside the group that were alive when the SIGKILL went out."""

    ended_by: str | None
    killed: tuple[int, ...] = ()

    def words(self, where: str = "outside its group") -> str:
        return f"; {outside_words(self.killed, killed=True, where=where)}" if self.killed else ""


def _stop_group(
    table: ProcessTable,
    pgid: int | None,
    grace_s: float,
    escaped: dict[int, int],
    cgroup: ServerCgroup | None = None,
) -> _Stopped:
    """SIGTERM, grace, SIGKILL, bounded wait, for the group (when ``pgid`` is given), the
    recorded escapees (pidfds) and what the cgroup holds outside the group."""
    outside = _Outside(escaped, cgroup, pgid)
    killed: tuple[int, ...] = ()
    for signum, bound in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_BOUND_S)):
        if signum == signal.SIGKILL:
            killed = outside.alive()
        follow = (signal.SIGCONT,) if signum == signal.SIGTERM else ()  # as systemd does
        for sent in (signum, *follow):  # a stopped orphan must run to handle its SIGTERM
            if pgid is not None:
                table.signal_group(pgid, sent)
            outside.signal(sent)
        if _wait_empty(table, pgid, bound, outside):
            ended = "SIGTERM" if signum == signal.SIGTERM else f"SIGKILL after {grace_s:g} s"
            return _Stopped(ended, killed)
    return _Stopped(None, killed)


@attrs.define
class _Outside:
    """What an orphan holds outside its group: the recorded escapees (pidfds) and the
    members of its cgroup that are not in the group (each signalled once: a member already
    held by a pidfd is not signalled again through the cgroup)."""

    escaped: dict[int, int]
    cgroup: ServerCgroup | None
    pgid: int | None

    def cgroup_outsiders(self) -> list[int]:
        if self.cgroup is None:
            return []
        return [pid for pid in self.cgroup.members() if not self._in_group(pid)]

    def _in_group(self, pid: int) -> bool:
        try:
            return self.pgid is not None and os.getpgid(pid) == self.pgid
        except ProcessLookupError:
            return True  # gone: nothing to signal

    def alive(self) -> tuple[int, ...]:
        return tuple(sorted({*live(self.escaped), *self.cgroup_outsiders()}))

    def signal(self, signum: int) -> None:
        signal_all(self.escaped, signum)
        if self.cgroup is None:
            return
        if signum == signal.SIGKILL:
            self.cgroup.request_kill()
            return
        others = set(self.cgroup_outsiders()) - set(self.escaped)
        for pid, fd in self.cgroup.member_fds().items():
            try:
                if pid in others:
                    signal.pidfd_send_signal(fd, signum)
            except (ProcessLookupError, PermissionError):
                continue
            finally:
                os.close(fd)

    def empty(self) -> bool:
        held = self.cgroup is not None and bool(self.cgroup.members())
        return not live(self.escaped) and not held


def _wait_empty(table: ProcessTable, pgid: int | None, timeout_s: float, outside: _Outside) -> bool:
    deadline = table.monotonic() + timeout_s
    while (pgid is not None and table.live_members(pgid)) or not outside.empty():
        remaining = deadline - table.monotonic()
        if remaining <= 0:
            return False
        table.sleep(min(POLL_S, remaining))
    return True
