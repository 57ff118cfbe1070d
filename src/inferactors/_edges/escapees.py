"""Descendants of a managed server that left its process group.

A wrapper that runs ``setsid llama-server "$@" & wait`` (llama-swap #804) puts the real
server in a session and process group of its own: a signal to our group never reaches
it, and the parent-death signal is not inherited across fork. `Escapees` finds such
descendants (psutil ``children(recursive=True)`` of the leader and of the escapees found
so far, keeping those whose process group is not ours) and holds a pidfd for each, opened
and *then* checked against the start time the scan saw: a pidfd names one process for
good, so a signal sent through it can never reach a process that reused the pid.

All methods are synchronous and cheap (one walk of ``/proc``, about 2 ms with 100
processes); they run in the trio thread.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterable

import attrs
import psutil

from .proctable import ProcessTable, SystemProcessTable, tree_pids


@attrs.define(eq=False)
class Escapees:
    """The tracked descendants of the process ``leader`` outside the group ``pgid``."""

    leader: int
    pgid: int
    shape: frozenset[tuple[int, int]] = frozenset()
    """``(pid, pgid)`` of every process the last `track` looked at (the leader's tree and
    the pids given): while it is the same, so are the server's group and outsiders, as
    far as pids tell (a pid reused in the tree between two looks is not seen)."""
    _fds: dict[int, int] = attrs.field(factory=dict)

    def track(self, also: Iterable[int] = (), *, walk: bool = True) -> tuple[int, ...]:
        """Scan for new escapees, forget the ones that exited; return the live ones.

        Args:
            also: More pids known to be the server's by other means (its cgroup's members,
                orphans adopted by its session): each that is outside the group is kept
                like a descendant found by the scan.
            walk: Whether to walk the tree of the leader and of the escapees (False: only
                ``also``, when it is the whole of the server, as a cgroup's members are).
        """
        self._forget_exited()
        found = descendants((self.leader, *self._fds)) if walk else []
        shape: dict[int, int] = {}
        for pid in also:
            try:
                shape[pid] = os.getpgid(pid)
                if pid in self._fds or pid == self.leader or shape[pid] == self.pgid:
                    continue  # known, or in the group: no need to read its start
                found.append(psutil.Process(pid))
            except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
                continue
        for child in found:
            try:
                pgid = shape[child.pid] = os.getpgid(child.pid)
                if child.pid in self._fds or child.pid == self.leader or pgid == self.pgid:
                    continue
                started = child.create_time()
            except (psutil.NoSuchProcess, ProcessLookupError):
                continue
            self._adopt(child.pid, started)
        self.shape = frozenset(shape.items())
        return self.alive()

    def alive(self) -> tuple[int, ...]:
        """The tracked escapees that have not exited yet."""
        return live(self._fds)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every live escapee, through its pidfd."""
        signal_all(self._fds, signum)

    def close(self) -> None:
        """Close every pidfd (the processes are not touched)."""
        close_all(self._fds)

    def _adopt(self, pid: int, started: float) -> None:
        """Open a pidfd for ``pid`` and keep it if ``pid`` is still the process seen."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            same = psutil.Process(pid).create_time() == started
        except psutil.NoSuchProcess:
            same = False
        if not same or _exited(fd):
            os.close(fd)
            return
        self._fds[pid] = fd

    def _forget_exited(self) -> None:
        for pid, fd in list(self._fds.items()):
            if _exited(fd):
                os.close(fd)
                del self._fds[pid]


def descendants(roots: Iterable[int]) -> list[psutil.Process]:
    """The descendants of any of ``roots``, each once, from the kernel's children lists
    (`proctable.tree_pids`: no walk of every process on the machine); a root that is gone
    or hidden from us has none."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        for pid in tree_pids(root)[1:]:
            if pid in found:
                continue
            try:
                found[pid] = psutil.Process(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return list(found.values())


def _exited(fd: int) -> bool:
    """A pidfd is readable once its process has exited (Linux 5.3)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


# The server record's side (``orphan_record.refresh_record``, ``orphans.reap_orphans``).


def scan_escaped(
    table: SystemProcessTable,
    leader: int,
    pgid: int,
    known: tuple[tuple[int, float], ...],
    boot_time: float,
) -> tuple[tuple[int, float], ...]:
    """``(pid, create_time)`` of the live descendants of ``leader`` outside group ``pgid``,
    plus the ``known`` ones still alive with the same start (and their descendants); each
    start expressed against ``boot_time`` (the record's). Blocking."""
    kept: dict[int, float] = {}
    for pid, created in known:
        process = table.identify(pid)
        if process is not None and not process.zombie and process.started_as(created, boot_time):
            kept[pid] = created
    for child in descendants((leader, *kept)):
        process = table.identify(child.pid)
        if process is None or process.zombie or process.pgid == pgid:
            continue
        kept.setdefault(child.pid, process.create_time - process.boot_time + boot_time)
    return tuple(sorted(kept.items()))


def open_recorded(
    table: ProcessTable, escaped: tuple[tuple[int, float], ...], boot_time: float
) -> dict[int, int]:
    """A pidfd for each recorded escapee that is still the recorded process (same start,
    checked after the pidfd was opened, so the pidfd names exactly that process)."""
    fds: dict[int, int] = {}
    if not hasattr(os, "pidfd_open"):
        return fds  # no pidfds (not Linux): an escapee could not be signalled safely
    for pid, created in escaped:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        process = table.identify(pid)
        if process is None or process.zombie or not process.started_as(created, boot_time):
            os.close(fd)
            continue
        fds[pid] = fd
    return fds


def live(fds: dict[int, int]) -> tuple[int, ...]:
    """The pids among ``fds`` whose process has not exited."""
    return tuple(sorted(pid for pid, fd in fds.items() if not _exited(fd)))


def signal_all(fds: dict[int, int], signum: int) -> None:
    """Send ``signum`` through every pidfd; a process already gone is not an error."""
    for fd in fds.values():
        try:
            signal.pidfd_send_signal(fd, signum)
        except (ProcessLookupError, PermissionError):
            continue


def close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()
