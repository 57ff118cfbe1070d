"""Whether a server's process group still has a live member, read only where its members
can be: `group_alive`, which a stop polls every few milliseconds on the event loop.

A process group never spans sessions, and a process never joins a session it was not
born in; the exec helper makes the server's leader a session leader and a child
subreaper (``spawn.py``). So the live members of the group led by ``leader`` are:

- with a cgroup (``cgroups.py``): among its ``cgroup.procs`` (everything the server starts
  stays there);
- without, while the leader lives: in its tree (the kernel's ``children`` lists,
  `proctable.tree_pids`): what its children orphan is re-parented to it;
- without, once the leader exited (it waits, unreaped, for the stop to end) and this
  process is a child subreaper (``inferactors run``): in the trees of this process's
  children of the leader's session (the leader's orphans came to us, and nothing of
  another session can join the group);
- otherwise (a library's host, no subreaper, the leader exited): its orphans went to
  init or to another subreaper, out of our sight; only a walk of every process on the
  host finds them (`SystemProcessTable.live_members`).

Each candidate is then checked for its group id and for being a zombie. Blocking reads of
``/proc`` and cgroupfs: a few microseconds per candidate, where the walk of every process
costs about half a millisecond with 100 processes on the host.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import psutil

from .proctable import SystemProcessTable, child_pids, tree_pids
from .subreaper import is_subreaper


def group_alive(leader: int, cgroup_members: Callable[[], list[int]] | None) -> bool:
    """Whether a live (not zombie) process is left in the group ``leader`` leads
    (module docstring); ``cgroup_members`` reads the server's cgroup, None without one."""
    if cgroup_members is not None:
        return _any_member(leader, cgroup_members())
    if not _leader_exited(leader):
        return _any_member(leader, tree_pids(leader))
    if is_subreaper():
        return _any_member(leader, _orphans_of(leader))
    return bool(SystemProcessTable().live_members(leader))


def _orphans_of(leader: int) -> list[int]:
    """The trees of this process's children in ``leader``'s session."""
    found: list[int] = []
    for pid in child_pids(os.getpid()):
        try:
            if pid != leader and os.getsid(pid) == leader:
                found.extend(tree_pids(pid))
        except (ProcessLookupError, PermissionError):
            continue
    return found


def _any_member(pgid: int, candidates: Iterable[int]) -> bool:
    for pid in candidates:
        try:
            if os.getpgid(pid) == pgid and not _exited(pid):
                return True
        except ProcessLookupError:
            continue
    return False


def _leader_exited(leader: int) -> bool:
    """Whether ``leader`` exited: one ``waitid`` that reaps nothing when it is our child
    (as a server's leader is), else `_exited`."""
    try:
        return os.waitid(os.P_PID, leader, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return _exited(leader)


def _exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
