"""The supervisor as the parent of what its servers orphan: `become_subreaper` and
`Reaper`.

With ``PR_SET_CHILD_SUBREAPER`` a process whose parent dies (a server's wrapper exiting
after it daemonized the real server) is re-parented to the supervisor instead of init: it
stays where ``children(recursive=True)`` of the supervisor finds it, its exit is ours to
collect, and it is never lost to another tree. Set only by ``inferactors run``, which owns
its process: in a library's host every orphan of the host's other children would become
the host's.

An adopted orphan that exits is a zombie of ours until it is waited for. `Reaper.sweep`
waits for exactly those: a zombie child that is not a pid we know to be waited for by
someone else (the servers' leaders, which trio waits on) and that was already a zombie at
the previous sweep, so a child of ours that trio (or ``subprocess``) is about to collect
is never taken from it. Linux only; elsewhere both do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Container

import attrs
import psutil

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, for prctl(2), opened once; None off Linux or where it cannot be."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; whether it now is."""
    libc = _libc()
    if libc is None:
        return False
    zero = ctypes.c_ulong(0)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), zero, zero, zero) == 0)


def is_subreaper() -> bool:
    """Whether this process is a child subreaper now (`become_subreaper`); False off Linux."""
    libc = _libc()
    if libc is None:
        return False
    flag = ctypes.c_int(0)
    zero = ctypes.c_ulong(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), zero, zero, zero) != 0:
        return False
    return flag.value != 0


@attrs.define
class Reaper:
    """Waits for the zombies of adopted orphans (module docstring).

    Attributes:
        reaped: ``(pid, wait status)`` of each one collected so far.
    """

    reaped: list[tuple[int, int]] = attrs.Factory(list)
    _seen: set[int] = attrs.Factory(set)

    def sweep(self, known: Container[int] = ()) -> list[int]:
        """Collect the zombie children that were zombies at the previous sweep too and are
        not ``known``; the pids collected. Blocking (reads ``/proc``): call it in a thread
        or a short step."""
        zombies = set()
        for child in psutil.Process().children():
            try:
                if child.status() == psutil.STATUS_ZOMBIE and child.pid not in known:
                    zombies.add(child.pid)
            except psutil.Error:
                continue
        collected = []
        for pid in zombies & self._seen:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # someone else collected it meanwhile
            if done == pid:
                self.reaped.append((pid, status))
                collected.append(pid)
        self._seen = zombies - set(collected)
        return collected
