"""The parent's side of the exec helper (``spawn_child.py``): what it is told (the plan:
argv, environment, working directory, limits, the user switch, the descriptors kept), the
pipes it gets, its ``posix_spawn``, and its exec status. Split from ``spawn.py``, whose
module docstring says why a helper and in what order it sets the child up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import trio

from .._policy.privilege import RunAs

HELPER = Path(__file__).with_name("spawn_child.py")
"""The exec helper every child starts as (``spawn_child.py``)."""

STATUS_BYTES = 4096
CHILD_RLIMITS: tuple[tuple[str, int], ...] = (
    ("RLIMIT_CORE", 0),
    ("RLIMIT_NOFILE", 4096),
    ("RLIMIT_FSIZE", 1 << 44),
)
"""Resource limits set in the child, by `resource` name (``spawn.py`` says why each)."""


def child_plan(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    run_as: RunAs | None,
    pass_fds: Sequence[int],
) -> dict[str, object]:
    """What the exec helper is told (``spawn_child.py``), decided in the parent.

    Raises:
        PermissionError: from `plan_switch`, before anything is spawned.
    """
    switch = plan_switch(run_as, os.geteuid(), os.getegid())
    return {
        "argv": [str(arg) for arg in argv],
        "env": dict(env),
        "cwd": str(cwd),
        "rlimits": _planned_rlimits(),
        "switch": None if switch is None else [list(switch.groups), switch.gid, switch.uid],
        "parent_pid": os.getpid(),
        "pass_fds": [int(fd) for fd in pass_fds],
    }


@attrs.frozen
class ChildEnds:
    """The descriptors the helper gets: its plan, its status pipe, stdout, stderr, the
    descriptors the server keeps (at their own numbers), and the ``cgroup.procs`` of its
    cgroup, which the helper writes and closes before the exec (None: no cgroup)."""

    plan: int
    status: int
    stdout: int
    stderr: int
    keep: tuple[int, ...]
    cgroup: int | None = None


def spawn_helper(ends: ChildEnds, plan: bytes, plan_fd: int) -> int:
    """``os.posix_spawn`` the exec helper with ``ends`` in this thread, then write it its
    ``plan`` on ``plan_fd`` (a pipe's write end, closed here); its pid. The parent-death
    signal the helper arms follows this thread (the forker's). Blocking."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, ends.stdout, 1),
        (os.POSIX_SPAWN_DUP2, ends.stderr, 2),
        *((os.POSIX_SPAWN_DUP2, fd, fd) for fd in (ends.plan, ends.status, *ends.keep)),
        *(() if ends.cgroup is None else ((os.POSIX_SPAWN_DUP2, ends.cgroup, ends.cgroup),)),
    ]  # a dup2 onto itself clears close-on-exec in the child only
    python = sys.executable
    argv = [python, "-I", "-S", str(HELPER), str(ends.plan), str(ends.status)]
    try:
        pid = os.posix_spawn(
            python,
            argv,
            {},
            file_actions=actions,
            setsigmask=(),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),  # as subprocess's restore_signals
        )
        with (
            contextlib.suppress(BrokenPipeError),  # it died first: its status says why
            open(plan_fd, "wb", closefd=False) as sink,
        ):
            sink.write(plan)
    finally:
        os.close(plan_fd)
    return pid


@attrs.define(eq=False)
class HelperPipes:
    """The pipes of one spawn; whatever was not handed over is closed on exit."""

    plan: tuple[int, int] = attrs.Factory(os.pipe)
    status: tuple[int, int] = attrs.Factory(os.pipe)
    stdout: tuple[int, int] = attrs.Factory(os.pipe)
    stderr: tuple[int, int] = attrs.Factory(os.pipe)
    _open: set[int] = attrs.Factory(set)

    def __enter__(self) -> HelperPipes:
        self._open = {*self.plan, *self.status, *self.stdout, *self.stderr}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for fd in self._open:
            close_quietly(fd)

    def take_plan(self) -> int:
        """The plan's write end, for `spawn_helper` to write and close."""
        self._open.discard(self.plan[1])
        return self.plan[1]

    def child_ends(self, keep: Sequence[int]) -> ChildEnds:
        ends = (self.plan[0], self.status[1], self.stdout[1], self.stderr[1])
        return ChildEnds(*ends, tuple(keep))

    def close_child_ends(self) -> None:
        for fd in (self.plan[0], self.status[1], self.stdout[1], self.stderr[1]):
            self._open.discard(fd)
            close_quietly(fd)

    def take_status(self) -> trio.lowlevel.FdStream:
        self._open.discard(self.status[0])
        return trio.lowlevel.FdStream(self.status[0])

    def take_output(self) -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
        self._open -= {self.stdout[0], self.stderr[0]}
        return trio.lowlevel.FdStream(self.stdout[0]), trio.lowlevel.FdStream(self.stderr[0])


def close_quietly(fd: int) -> None:
    """Close ``fd``, already closed or not."""
    with contextlib.suppress(OSError):
        os.close(fd)


async def exec_status(status: trio.lowlevel.FdStream) -> OSError | None:
    """None once the helper executed the program (its status pipe closed unwritten), else
    its failure as an `OSError`. Shielded: a spawned child always reaches its owner."""
    said = b""
    with trio.CancelScope(shield=True):
        async with status:
            while chunk := await status.receive_some(STATUS_BYTES):
                said += chunk
    if not said:
        return None
    number, _, message = said.decode(errors="replace").partition(" ")
    code = int(number) if number.isdigit() else 0
    return OSError(code or errno.ECHILD, message or "the exec helper failed")


def clamp_limit(want: int, hard: int) -> int:
    """The limit to set: ``want``, unless the current hard limit is lower (it cannot rise)."""
    if hard == resource.RLIM_INFINITY:
        return want
    return min(want, hard)


def _planned_rlimits() -> list[tuple[int, int]]:
    """``(resource, value)`` pairs for `CHILD_RLIMITS`, computed in the parent."""
    plan = []
    for name, want in CHILD_RLIMITS:
        which = getattr(resource, name)
        plan.append((which, clamp_limit(want, resource.getrlimit(which)[1])))
    return plan


@attrs.frozen
class IdentitySwitch:
    """What the child calls to become ``run_as``: ``setgroups(groups)``, ``setgid``, ``setuid``."""

    groups: tuple[int, ...]
    gid: int
    uid: int


def plan_switch(run_as: RunAs | None, euid: int, egid: int) -> IdentitySwitch | None:
    """The user switch the child must make, decided in the parent (pure).

    Returns:
        None without ``run_as``, or when we already are that user and group (a supervisor
        running as the server's own unprivileged account); else the switch to make.

    Raises:
        PermissionError: a switch is needed and ``euid`` is not 0 (only root may switch).
    """
    if run_as is None or (run_as.uid == euid and run_as.gid == egid):
        return None
    if euid != 0:
        raise PermissionError(
            errno.EPERM,
            f"only root can run a server as user {run_as.name}; inferactors runs as uid {euid}",
        )
    return IdentitySwitch(run_as.groups, run_as.gid, run_as.uid)
