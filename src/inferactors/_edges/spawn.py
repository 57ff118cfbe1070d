"""The child side of the process edge: fork, set the child up, exec.

`open_child_process` is the real `OpenProcess` that ``ManagedProcess.spawn`` (``process.py``)
uses. Between fork and exec the child runs `_child_setup`, in this order:

1. resource limits (`CHILD_RLIMITS`): ``RLIMIT_CORE`` 0, ``RLIMIT_NOFILE`` 4096,
   ``RLIMIT_FSIZE`` ``1 << 44``, each clamped to the current hard limit. The reference also
   sets ``RLIMIT_AS`` to ``1 << 46``; we leave it out, because GPU runtimes (CUDA, ROCm,
   Vulkan) reserve huge virtual address ranges at start-up and fail under an address-space
   limit, while a bound on resident memory is not what ``RLIMIT_AS`` measures anyway;
2. with ``run_as``: ``setgroups`` (its supplementary groups, or none), ``setgid``, ``setuid``;
3. on Linux, ``PR_SET_PDEATHSIG`` = SIGKILL, so a supervisor killed with SIGKILL does not
   leave a server holding memory and the port. It comes *after* the user switch
   because the kernel clears the parent-death signal whenever the effective uid or gid
   changes (prctl(2)); set first, it would silently be lost for every ``run_as`` server;
4. on Linux, ``PR_SET_NO_NEW_PRIVS`` = 1: from the exec on, nothing the
   server or its children run can gain privileges (setuid and setgid bits and file
   capabilities are ignored); it is inherited across fork and exec and cannot be unset;
5. if the parent died before the signal was armed, the child exits at once.

The child also starts a new session, so its process group id equals its pid and every signal
goes to the whole group (a wrapper that forks cannot hide a grandchild).

Why the fork happens in a thread of its own, the *forker*, and not in
`trio.lowlevel.open_process`: Linux sends the parent-death signal when the *thread* that
forked the child ends, not the process. ``open_process`` forks in a trio worker thread, and
idle worker threads end after 10 s, which would SIGKILL every server 10 s after it started.
The forker is one daemon thread started at the first spawn that never ends (it waits for
work), so a server dies with the process and not before. The fork used to happen in the trio
thread, which blocked the event loop for the whole `subprocess.Popen`: the fork,
the child's setup above and its exec (3 ms here, 14 ms in a busy supervisor). Now the loop
only waits for the GIL while the forker is inside ``fork()`` itself (CPython holds it there
when a ``preexec_fn`` is given); the child's setup and exec run while the loop runs.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs
import trio

from .._policy.privilege import RunAs
from .forker import in_forker
from .proctable import SystemProcessTable

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_ZERO_ARGS = (ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
CHILD_RLIMITS: tuple[tuple[str, int], ...] = (
    ("RLIMIT_CORE", 0),
    ("RLIMIT_NOFILE", 4096),
    ("RLIMIT_FSIZE", 1 << 44),
)
"""Resource limits set in the child, by `resource` name."""


class ChildProcess(Protocol):
    """A started child, as ``ManagedProcess`` drives it. `PosixChild` is the real one."""

    @property
    def pid(self) -> int: ...
    @property
    def stdout(self) -> trio.abc.ReceiveStream: ...
    @property
    def stderr(self) -> trio.abc.ReceiveStream: ...

    async def wait_exiting(self) -> None:
        """Return once the child has exited (it may still be an unreaped zombie)."""
        ...

    def reap(self) -> int:
        """Collect the exit status of an exited child; returns the returncode (-N: signal N)."""
        ...

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the child's process group; False when the group is gone."""
        ...

    def group_alive(self) -> bool:
        """Whether a live (not zombie) process is left in the child's group: after the
        leader exited, a forking wrapper's server may still be shutting down."""
        ...


class OpenProcess(Protocol):
    """The spawn function: starts ``argv`` and returns the child (`open_child_process`).

    It must start the child in its own session, with stdin on ``/dev/null``, stdout and
    stderr piped, exactly ``env`` as environment, ``cwd`` as working directory, and as the
    user ``run_as`` when one is given. ``pass_fds`` (given only when not empty, so an opener
    written without it still serves launches that pass nothing) stay open in the child at
    the same numbers; every other descriptor of ours is closed. It raises `OSError` or
    `subprocess.SubprocessError` when the program cannot be started.
    """

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None,
        pass_fds: Sequence[int] = (),
    ) -> ChildProcess: ...


@attrs.define(eq=False)
class PosixChild:
    """A child started by `open_child_process`: a `subprocess.Popen` plus trio pipe streams."""

    _popen: subprocess.Popen[bytes]
    _stdout: trio.lowlevel.FdStream
    _stderr: trio.lowlevel.FdStream
    _pidfd: int | None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self._stderr

    async def wait_exiting(self) -> None:
        """Wait for the exit: on a pidfd (Linux), else in a worker thread that reaps."""
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        else:
            await trio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)

    def reap(self) -> int:
        returncode = self._popen.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return returncode

    def signal_group(self, signum: int) -> bool:
        try:
            os.killpg(self._popen.pid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member changed uid; the others got the signal
            return True
        return True

    def group_alive(self) -> bool:
        """Reads the process table (``/proc``, about 1 ms with 100 processes)."""
        return bool(SystemProcessTable().live_members(self._popen.pid))


async def open_child_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    run_as: RunAs | None = None,
    pass_fds: Sequence[int] = (),
) -> PosixChild:
    """Start ``argv`` as the leader of a new session, the real `OpenProcess`.

    The fork happens in the forker thread (see the module docstring); this waits for it,
    until the program has been executed (a few ms), and cannot be cancelled meanwhile: a
    child once forked is returned, so that its owner can stop it.

    Args:
        argv: The program and its arguments; never run through a shell.
        cwd: The working directory (entered before the user switch).
        env: The whole environment of the child.
        run_as: The user to run as; None keeps our own user.
        pass_fds: Descriptors the child inherits at the same numbers (the verified model
            files it is told to open as ``/proc/self/fd/N``); all others are closed.

    Raises:
        PermissionError: ``run_as`` names another user and we are not root.
        OSError: the program is missing, not executable (by ``run_as``), or ``cwd`` does
            not exist.
        subprocess.SubprocessError: the child setup (limits, user switch, parent-death
            signal) failed.
    """
    await trio.lowlevel.checkpoint()
    setup = _child_setup(os.getpid(), run_as)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        fork = functools.partial(_fork_exec, argv, cwd, env, (out_write, err_write), setup)
        popen, pidfd = await in_forker(functools.partial(_with_pidfd, fork, pass_fds))
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    stdout = trio.lowlevel.FdStream(out_read)
    stderr = trio.lowlevel.FdStream(err_read)
    return PosixChild(popen, stdout, stderr, pidfd)


def _with_pidfd(
    fork: Callable[[Sequence[int]], subprocess.Popen[bytes]], pass_fds: Sequence[int]
) -> tuple[subprocess.Popen[bytes], int | None]:
    popen = fork(pass_fds)
    return popen, _open_pidfd(popen.pid)


def _fork_exec(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    out_err: tuple[int, int],
    setup: Callable[[], None],
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Fork and exec in this thread (the forker: the parent-death signal follows it)."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=out_err[0],
        stderr=out_err[1],
        close_fds=True,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        preexec_fn=setup,
    )


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where the platform or kernel has none."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


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


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` on Linux, else None. Loaded in the parent, never after the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function: Callable[..., int] = libc.prctl
    return function


def _child_setup(parent_pid: int, run_as: RunAs | None = None) -> Callable[[], None]:
    """The function the child runs between fork and exec (order: see the module docstring).

    Everything it needs is prepared here, in the parent, so the child only makes system
    calls. If the parent died before the parent-death signal was armed, the child exits.

    Raises:
        PermissionError: from `plan_switch`, in the parent, before anything is forked.
    """
    limits = _planned_rlimits()
    switch = plan_switch(run_as, os.geteuid(), os.getegid())
    prctl = _prctl()
    pdeathsig_args = (_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), *_ZERO_ARGS)
    no_new_privs_args = (_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), *_ZERO_ARGS)

    def setup() -> None:
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if switch is not None:
            os.setgroups(list(switch.groups))
            os.setgid(switch.gid)
            os.setuid(switch.uid)
        if prctl is None:
            return
        if prctl(*pdeathsig_args) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if prctl(*no_new_privs_args) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup
