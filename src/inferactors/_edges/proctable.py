"""The process table edge: who a pid is now, who is in a process group, group signals, a clock.

Used by the orphan reaper (``orphans.py``). Identity rests on the process's
start time, not its pid alone: here ``pid_max`` is 32768, so pids come round quickly. psutil's
``create_time`` is in epoch seconds and moves when the wall clock is stepped (it adds the
boot time read at that moment), so `ProcessStart` keeps the boot time read alongside, and
`ProcessStart.started_as` compares starts counted from boot, which never move.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

import attrs
import psutil

START_TOLERANCE_S = 0.005
"""How far two readings of one process's start (seconds since boot) may differ."""

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

_STOPPED_STATES = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})


@attrs.frozen
class ProcessStart:
    """One process as the process table sees it now.

    Attributes:
        pid: The process id.
        pgid: Its process group id.
        create_time: psutil's ``create_time``: when it started, in epoch seconds.
        boot_time: psutil's ``boot_time`` read alongside (epoch seconds); ``create_time -
            boot_time`` is the start counted from boot, which a clock step does not move.
        zombie: True when it has exited and waits to be reaped.
        stopped: True when a signal stopped it (state ``T``: SIGSTOP, SIGTSTP, ...) or a
            tracer holds it (``t``); it runs again only on SIGCONT.
    """

    pid: int
    pgid: int
    create_time: float
    boot_time: float
    zombie: bool = False
    stopped: bool = False

    def started_as(self, create_time: float, boot_time: float) -> bool:
        """True when this is the process that was recorded with these two readings."""
        recorded = create_time - boot_time
        return abs((self.create_time - self.boot_time) - recorded) <= START_TOLERANCE_S


class ProcessTable(Protocol):
    """The OS edge of the reaper: process identities, group signals and the clock."""

    def boot_id(self) -> str:
        """An id of the current boot ("" when the platform has none)."""
        ...

    def identify(self, pid: int) -> ProcessStart | None:
        """The process with this pid now, a zombie included; None when there is none."""
        ...

    def live_members(self, pgid: int) -> tuple[int, ...]:
        """Pids in group ``pgid`` that are alive (zombies excluded)."""
        ...

    def signal_group(self, pgid: int, signum: int) -> None:
        """Send ``signum`` to group ``pgid``; a group that is gone is not an error."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that only moves forward."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...


@attrs.frozen
class SystemProcessTable:
    """The real `ProcessTable`: psutil, ``/proc``, `os.killpg` and the `time` module."""

    def boot_id(self) -> str:
        try:
            return _BOOT_ID.read_text().strip()
        except OSError:
            return ""

    def identify(self, pid: int) -> ProcessStart | None:
        try:
            process = psutil.Process(pid)
            created = process.create_time()
            booted = psutil.boot_time()
            state = process.status()
            zombie = state == psutil.STATUS_ZOMBIE
            stopped = state in _STOPPED_STATES
            return ProcessStart(pid, os.getpgid(pid), created, booted, zombie, stopped)
        except (psutil.NoSuchProcess, ProcessLookupError):
            return None

    def live_members(self, pgid: int) -> tuple[int, ...]:
        members = []
        for pid in psutil.pids():
            try:
                if os.getpgid(pid) == pgid and not _is_zombie(pid):
                    members.append(pid)
            except (psutil.NoSuchProcess, ProcessLookupError):
                continue
        return tuple(members)

    def signal_group(self, pgid: int, signum: int) -> None:
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            pass  # the group is gone already

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _is_zombie(pid: int) -> bool:
    return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)


_TREE_LIMIT = 4096


def tree_pids(root: int) -> list[int]:
    """``root`` and its descendants, from the kernel's per-thread ``children`` lists (no walk
    of every process on the machine); through psutil where those lists are missing (a
    kernel without ``CONFIG_PROC_CHILDREN``). ``[]`` when ``root`` is gone."""
    if not os.path.exists(f"/proc/{root}"):
        return []
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        try:
            return [root, *(child.pid for child in psutil.Process(root).children(recursive=True))]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
    pids, index = [root], 0
    while index < len(pids) and len(pids) < _TREE_LIMIT:
        pids.extend(pid for pid in _children(pids[index]) if pid not in pids)
        index += 1
    return pids


def child_pids(pid: int) -> list[int]:
    """The children of ``pid`` (each of its threads' ``children`` list; ``[]`` when it is
    gone or the kernel keeps no such lists)."""
    return _children(pid)


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as listing:
                found.extend(int(word) for word in listing.read().split())
        except (OSError, ValueError):
            continue
    return found


def tree_sockets(root: int) -> dict[int, int]:
    """Socket inode -> pid for every descriptor of process ``root`` and its descendants
    (root first, so a socket shared across a fork is the root's). Reads ``/proc/<pid>/fd``
    links of the tree's processes only (`tree_pids`); processes that vanish or deny access
    are skipped. Blocking, about 0.1 ms for a one-process server."""
    found: dict[int, int] = {}
    for pid in tree_pids(root):
        for inode in _socket_inodes(pid):
            found.setdefault(inode, pid)
    return found


def _socket_inodes(pid: int) -> list[int]:
    where = f"/proc/{pid}/fd"
    try:
        names = os.listdir(where)
    except OSError:
        return []
    inodes = []
    for name in names:
        try:
            target = os.readlink(f"{where}/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.append(int(target[8:-1]))
    return inodes


def descends_from(pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants (walks parents: a few reads)."""
    if pid == root:
        return True
    try:
        return any(parent.pid == root for parent in psutil.Process(pid).parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
