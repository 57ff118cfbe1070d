"""The child side of the process edge: spawn an exec helper that sets the child up, then exec.

`open_child_process` is the real `OpenProcess` that ``ManagedProcess.spawn`` (``process.py``)
uses. It starts the exec helper (``spawn_child.py``) with ``os.posix_spawn`` (a vfork: no
copy of the supervisor's memory, no Python code between fork and exec, so the event loop
never waits for the GIL through a fork) and hands it a plan computed here; the helper sets
the child up after the fork, in this order:

1. a new session, so its process group id equals its pid and every signal goes to the
   whole group (a wrapper that forks cannot hide a grandchild);
2. resource limits (`CHILD_RLIMITS`): ``RLIMIT_CORE`` 0, ``RLIMIT_NOFILE`` 4096,
   ``RLIMIT_FSIZE`` ``1 << 44``, each clamped to the current hard limit. The reference also
   sets ``RLIMIT_AS`` to ``1 << 46``; we leave it out, because GPU runtimes (CUDA, ROCm,
   Vulkan) reserve huge virtual address ranges at start-up and fail under an address-space
   limit, while a bound on resident memory is not what ``RLIMIT_AS`` measures anyway;
3. the working directory, then, with ``run_as``: ``setgroups`` (its supplementary groups,
   or none), ``setgid``, ``setuid``;
4. on Linux, ``PR_SET_PDEATHSIG`` = SIGKILL, so a supervisor killed with SIGKILL does not
   leave a server holding memory and the port. It comes *after* the user switch
   because the kernel clears the parent-death signal whenever the effective uid or gid
   changes (prctl(2)); set first, it would silently be lost for every ``run_as`` server;
5. on Linux, ``PR_SET_NO_NEW_PRIVS`` = 1: from the exec on, nothing the
   server or its children run can gain privileges (setuid and setgid bits and file
   capabilities are ignored); it is inherited across fork and exec and cannot be unset;
   and ``PR_SET_CHILD_SUBREAPER``: what the server's descendants orphan (a daemon's
   double fork) is re-parented to the server, not to init, so it stays in the tree the
   stop walks (``descendants.py``); kept across the exec, not inherited by its children;
6. if the parent died before the signal was armed, the child exits at once; every other
   descriptor is closed (stdin is ``/dev/null``, stdout and stderr our pipes, ``pass_fds``
   kept at their numbers), and the server is executed with exactly ``env``.

The helper reports a failure (missing program, a user switch refused, ...) on a
close-on-exec pipe that a successful exec closes unwritten; `open_child_process` waits for
that on the event loop (the helper is an isolated ``python -I -S``: about 10 to 25 ms of
its own CPU, none of ours).

Why the spawn happens in a thread of its own, the *forker*: Linux sends the parent-death
signal when the *thread* that created the child ends, not the process. trio's worker
threads end after 10 s idle, which would SIGKILL every server 10 s after it started; the
forker is one daemon thread started at the first spawn that never ends (``forker.py``).
Before, the forker ran ``subprocess.Popen`` with a ``preexec_fn``, and CPython holds the GIL
through ``fork()`` then: about 5 ms of a stalled loop per spawn, with the supervisor's
memory copied each time.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs
import trio

from .._policy.privilege import RunAs
from .cgroups import CgroupTree, ServerCgroup, server_tree
from .descendants import forget_leader, spawn_leader
from .forker import in_forker
from .group_members import group_alive
from .spawn_helper import CHILD_RLIMITS as CHILD_RLIMITS
from .spawn_helper import HELPER as HELPER
from .spawn_helper import ChildEnds as ChildEnds
from .spawn_helper import HelperPipes, exec_status
from .spawn_helper import IdentitySwitch as IdentitySwitch
from .spawn_helper import child_plan as child_plan
from .spawn_helper import clamp_limit as clamp_limit
from .spawn_helper import plan_switch as plan_switch
from .spawn_helper import spawn_helper as spawn_helper
from .startup_slots import StartupSlot

_log = logging.getLogger(__name__)


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
    """A child started by `open_child_process`: its pid, a pidfd (Linux), trio pipe streams."""

    _pid: int
    _stdout: trio.lowlevel.FdStream
    _stderr: trio.lowlevel.FdStream
    _pidfd: int | None
    _returncode: int | None = None
    startup_slot: StartupSlot | None = None
    """The start-up slot this spawn took (``startup_slots``), until the server is ready."""
    cgroup: ServerCgroup | None = None
    """The cgroup it runs in from its exec on (``cgroups.py``), None where the host
    delegates none."""

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self._stderr

    async def wait_exiting(self) -> None:
        """Wait for the exit, leaving the child unreaped: on a pidfd (Linux), else
        ``waitid(WNOWAIT)`` in a worker thread."""
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        elif self._returncode is None:
            flags = os.WEXITED | os.WNOWAIT
            await trio.to_thread.run_sync(os.waitid, os.P_PID, self._pid, flags)

    def reap(self) -> int:
        if self.startup_slot is not None:
            self.startup_slot.release()
        if self._returncode is None:
            _, status = os.waitpid(self._pid, 0)
            self._returncode = os.waitstatus_to_exitcode(status)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self._returncode

    def signal_group(self, signum: int) -> bool:
        try:
            os.killpg(self._pid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member changed uid; the others got the signal
            return True
        return True

    def group_alive(self) -> bool:
        """Reads only where the group's members can be (``group_members.py``): its cgroup,
        the leader's tree, or the leader's orphans; every process on the host only in a
        library's host without a subreaper once the leader exited."""
        members = None if self.cgroup is None else self.cgroup.members
        return group_alive(self._pid, members)


async def open_child_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    run_as: RunAs | None = None,
    pass_fds: Sequence[int] = (),
    cgroups: Callable[[], CgroupTree | None] = server_tree,
) -> PosixChild:
    """Start ``argv`` as the leader of a new session, the real `OpenProcess`.

    First a start-up slot of this run is taken (``startup_slots``: a few servers start at
    once; `ManagedProcess` gives it back at the readiness line). The exec helper is then
    spawned from the forker thread (see the module docstring); this waits, on the event
    loop, until the helper executed the program (or failed), and cannot be cancelled
    meanwhile: a child once spawned is returned, so that its owner can stop it.

    Args:
        argv: The program and its arguments; never run through a shell.
        cwd: The working directory (entered before the user switch).
        env: The whole environment of the child.
        run_as: The user to run as; None keeps our own user.
        pass_fds: Descriptors the child inherits at the same numbers (the verified model
            files it is told to open as ``/proc/self/fd/N``); all others are closed.
        cgroups: The cgroup tree to place the child in (`CgroupTree.place` under ``cwd``'s
            name), or None; this process's delegated tree by default (`server_tree`). A
            cgroup that cannot be made is logged and the child runs without one.

    Raises:
        PermissionError: ``run_as`` names another user and we are not root.
        OSError: the program is missing, not executable (by ``run_as``), ``cwd`` does not
            exist, or the child's setup (limits, user switch, parent-death signal) failed;
            the errno and message are the helper's.
    """
    plan = child_plan(argv, cwd, env, run_as, pass_fds)
    slot = await StartupSlot.take()  # a few servers start at once (``startup_slots``)
    try:
        child = await _spawn(plan, pass_fds, functools.partial(_place, cgroups, cwd))
    except BaseException:
        slot.release()
        raise
    child.startup_slot = slot
    return child


async def _spawn(
    plan: dict[str, object], pass_fds: Sequence[int], place: Callable[[], ServerCgroup | None]
) -> PosixChild:
    with HelperPipes() as pipes:
        ends = pipes.child_ends(pass_fds)
        job = functools.partial(_spawn_placed, ends, plan, pipes.take_plan(), place)
        pid, cgroup = await in_forker(job)
        pipes.close_child_ends()
        status = await exec_status(pipes.take_status())
        if status is not None:
            forget_leader(pid)
            with trio.CancelScope(shield=True):  # it exits right after reporting: reap it
                await trio.to_thread.run_sync(os.waitpid, pid, 0)
                if cgroup is not None:
                    await trio.to_thread.run_sync(cgroup.discard)
            raise status
        stdout, stderr = pipes.take_output()
    return PosixChild(pid, stdout, stderr, _open_pidfd(pid), cgroup=cgroup)


def _spawn_placed(
    ends: ChildEnds,
    plan: dict[str, object],
    plan_fd: int,
    place: Callable[[], ServerCgroup | None],
) -> tuple[int, ServerCgroup | None]:
    """In the forker: make the child's cgroup (if any), open its ``cgroup.procs`` for the
    helper, spawn the helper, close the descriptor; the pid and the cgroup. Blocking."""
    cgroup = place()
    fd = _procs_fd(cgroup)
    if fd is None:
        cgroup = None
    try:
        planned = json.dumps({**plan, "cgroup_fd": fd}).encode()
        pid = spawn_leader(lambda: spawn_helper(attrs.evolve(ends, cgroup=fd), planned, plan_fd))
    except BaseException:
        if cgroup is not None:
            cgroup.discard()
        raise
    finally:
        if fd is not None:
            os.close(fd)
    return pid, cgroup


def _procs_fd(cgroup: ServerCgroup | None) -> int | None:
    """The cgroup's ``cgroup.procs`` open for writing, or None (no cgroup; or it cannot be
    opened: said, and the cgroup removed)."""
    if cgroup is None:
        return None
    try:
        return cgroup.procs_fd()
    except OSError as error:
        _log.warning("cannot open %s/cgroup.procs (%s)", cgroup.path, error.strerror or error)
        cgroup.discard()
        return None


def _place(cgroups: Callable[[], CgroupTree | None], cwd: Path) -> ServerCgroup | None:
    """A new cgroup for a child in ``cwd``, or None (no tree; or it cannot be made: said)."""
    tree = cgroups()
    if tree is None:
        return None
    try:
        return tree.place(cwd)
    except OSError as error:
        _log.warning(
            "cannot make a cgroup for the server in %s under %s (%s); it is tracked by "
            "process group, pid and session only",
            cwd,
            tree.root,
            error.strerror or error,
        )
        return None


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where the platform or kernel has none."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None
