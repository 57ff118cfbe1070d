"""The process edge: start a managed server in its own process group and take it down again.

`ManagedProcess.spawn` starts a server (llama-server, mlx_lm.server) from a launch
description; `ManagedProcess.terminate` stops it. The behaviour follows seed-behaviour.md
section 4 ("Supervised") and checklist items 43-44, 48, 52 and 61:

- the child runs in a new session, so its process group id equals its pid and every signal
  goes to the whole group (FC-12: a wrapper that forks cannot hide a grandchild);
- stdin is ``/dev/null``; stdout and stderr are captured (`OutputCapture`);
- resource limits in the child: ``RLIMIT_CORE`` 0, ``RLIMIT_NOFILE`` 4096, ``RLIMIT_FSIZE``
  ``1 << 44`` (each clamped to the current hard limit). The reference also sets
  ``RLIMIT_AS`` to ``1 << 46``; we leave it out, because GPU runtimes (CUDA, ROCm, Vulkan)
  reserve huge virtual ranges at start-up and fail under an address-space limit;
- on Linux the child gets ``PR_SET_PDEATHSIG`` = SIGKILL, so a supervisor killed with SIGKILL
  does not leave a server holding memory and the port (FC-13);
- stopping is llama-swap's numbered kill steps: 1. SIGTERM the group, 2. wait the grace,
  3. SIGKILL the group, 4. wait for the exit (FC-05, FC-11);
- when the leader exits on its own its group is killed at once, so no grandchild outlives
  it (checklist item 52), and if the nursery that runs the process's tasks is cancelled, the
  group is killed and reaped (item 61).

Why the fork happens in the trio thread and not in `trio.lowlevel.open_process`: Linux sends
the parent-death signal when the *thread* that forked the child ends, not the process.
``open_process`` forks in a trio worker thread, and idle worker threads end after 10 s, which
would SIGKILL every server 10 s after it started. `open_child_process` therefore forks in
the thread running trio; that blocks the event loop for the fork and exec (a few ms).

Cleanup after an exit or during a stop runs in scopes that are shielded *and* carry their
own deadline (``trio.move_on_after(bound, shield=True)``): shielded so a cancelled caller
cannot leave a process behind, bounded so a process stuck in the kernel cannot hang us.
"""

from __future__ import annotations

import ctypes
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

from ._capture import OutputCapture, RunEvidence
from ._errors import BackendError

OUTPUT_DRAIN_S = 2.0
"""How long, after the leader's exit, the pipes get to reach end of file (seconds)."""

REAP_BOUND_S = 5.0
"""How long a SIGKILLed leader gets to be reaped before we give up waiting (seconds)."""

_SETTLE_BOUND_S = REAP_BOUND_S + OUTPUT_DRAIN_S + 1.0

_READ_CHUNK_BYTES = 65536
_PR_SET_PDEATHSIG = 1
_ZERO_ARGS = (ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
CHILD_RLIMITS: tuple[tuple[str, int], ...] = (
    ("RLIMIT_CORE", 0),
    ("RLIMIT_NOFILE", 4096),
    ("RLIMIT_FSIZE", 1 << 44),
)
"""Resource limits set in the child, by `resource` name (seed-behaviour.md section 4)."""


class LaunchLike(Protocol):
    """What `ManagedProcess.spawn` reads from a launch description (``_launch.Launch``)."""

    @property
    def program(self) -> Path: ...
    @property
    def args(self) -> tuple[str, ...]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...


class ChildProcess(Protocol):
    """A started child, as `ManagedProcess` drives it. `PosixChild` is the real one."""

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


class OpenProcess(Protocol):
    """The spawn function: starts ``argv`` and returns the child (`open_child_process`).

    It must start the child in its own session, with stdin on ``/dev/null``, stdout and
    stderr piped, exactly ``env`` as environment and ``cwd`` as working directory. It raises
    `OSError` or `subprocess.SubprocessError` when the program cannot be started.
    """

    async def __call__(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]
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


async def open_child_process(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]
) -> PosixChild:
    """Start ``argv`` as the leader of a new session, the real `OpenProcess`.

    The fork happens in the calling (trio) thread, see the module docstring; it blocks the
    event loop until the program has been executed (a few ms).

    Raises:
        OSError: the program is missing, not executable, or ``cwd`` does not exist.
        subprocess.SubprocessError: the child setup (limits, parent-death signal) failed.
    """
    await trio.lowlevel.checkpoint()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        popen = _fork_exec(argv, cwd, env, out_write, err_write)
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    stdout = trio.lowlevel.FdStream(out_read)
    stderr = trio.lowlevel.FdStream(err_read)
    return PosixChild(popen, stdout, stderr, _open_pidfd(popen.pid))


def _fork_exec(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], out_fd: int, err_fd: int
) -> subprocess.Popen[bytes]:
    """Fork and exec in this thread (so the parent-death signal follows this thread)."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=out_fd,
        stderr=err_fd,
        close_fds=True,
        start_new_session=True,
        preexec_fn=_child_setup(os.getpid()),
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


def _child_setup(parent_pid: int) -> Callable[[], None]:
    """The function the child runs between fork and exec: limits, then parent-death signal.

    Everything it needs is prepared here, in the parent, so the child only makes system
    calls. If the parent died before the parent-death signal was armed, the child exits.
    """
    limits = _planned_rlimits()
    prctl = _prctl()
    pdeathsig_args = (_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), *_ZERO_ARGS)

    def setup() -> None:
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if prctl is None:
            return
        if prctl(*pdeathsig_args) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup


@attrs.define(eq=False)
class ManagedProcess:
    """One running server process and the tasks that watch it.

    Get one from `spawn`. Two tasks run in the nursery given to `spawn`: an exit watcher
    and an output pump. The watcher is the only writer of the exit state: it notices the
    leader's exit as it happens, SIGKILLs the group, reaps the leader, lets the pipes drain
    for up to `OUTPUT_DRAIN_S` and builds the evidence. If that nursery is cancelled first,
    the watcher SIGKILLs the group and reaps it (bounded by `REAP_BOUND_S`) before it ends.

    Signals go to the group only while the leader is unreaped, so the group id is surely
    ours; after the reap nothing is signalled again (the watcher SIGKILLed the group just
    before it), so a later process that reuses the id is never touched.
    """

    _child: ChildProcess
    _args: tuple[str, ...]
    _started_at: float
    _stdout: OutputCapture = attrs.field(factory=OutputCapture)
    _stderr: OutputCapture = attrs.field(factory=OutputCapture)
    _exited: trio.Event = attrs.field(factory=trio.Event)
    _output_done: trio.Event = attrs.field(factory=trio.Event)
    _finished: trio.Event = attrs.field(factory=trio.Event)
    _output_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _returncode: int | None = None
    _exited_at: float | None = None
    _killed_after_grace: bool = False
    _evidence: RunEvidence | None = None

    @classmethod
    async def spawn(
        cls,
        nursery: trio.Nursery,
        launch: LaunchLike,
        *,
        open_process: OpenProcess = open_child_process,
    ) -> ManagedProcess:
        """Start ``launch`` and watch it from tasks in ``nursery``.

        Args:
            nursery: Runs the exit watcher and the output pump until the process is gone.
            launch: Program, args, working directory and the *whole* environment (nothing
                is inherited from ours).
            open_process: The spawn function; tests and higher layers may inject a fake.

        Raises:
            BackendError: the program could not be started (missing, not executable, bad
                cwd); the message names the program.
        """
        argv = (str(launch.program), *launch.args)
        try:
            child = await open_process(argv, cwd=launch.cwd, env=dict(launch.env))
        except (OSError, subprocess.SubprocessError) as error:
            raise BackendError(f"cannot start {launch.program}: {error}") from error
        process = cls(child, launch.args, trio.current_time())
        nursery.start_soon(process._watch_exit, name=f"inferactors exit watcher {child.pid}")
        nursery.start_soon(process._pump_output, name=f"inferactors output {child.pid}")
        return process

    @property
    def pid(self) -> int:
        """The leader's process id."""
        return self._child.pid

    @property
    def pgid(self) -> int:
        """The process group id; equal to `pid`, since the leader starts a new session."""
        return self._child.pid

    @property
    def started_at(self) -> float:
        """`trio.current_time` when the process was spawned (seconds)."""
        return self._started_at

    @property
    def returncode(self) -> int | None:
        """None while the leader runs; then its returncode (``-N``: killed by signal N)."""
        return self._returncode

    @property
    def running(self) -> bool:
        """True until the leader's exit has been noticed (or, for a leader that a SIGKILL
        could not end, until `REAP_BOUND_S` has been spent waiting for it)."""
        return not self._exited.is_set()

    async def wait_exited(self) -> RunEvidence:
        """Wait until the leader has exited and its group is gone, then return the evidence.

        By then the group has been SIGKILLed (no grandchild outlives the leader) and the
        pipes have reached end of file or had `OUTPUT_DRAIN_S` to do so. Cancelling this
        wait leaves the process running and watched.
        """
        await self._finished.wait()
        return self._current_evidence()

    async def terminate(self, grace_s: float) -> RunEvidence:
        """Stop the process: SIGTERM the group, wait ``grace_s``, SIGKILL the group, reap.

        Safe to call after the process exited, or twice: it then signals nothing and returns
        the evidence. If the task is cancelled during the grace period, the group is SIGKILLed
        at once and reaped (shielded, bounded by `REAP_BOUND_S` + `OUTPUT_DRAIN_S` + 1 s)
        before `trio.Cancelled` propagates.

        Args:
            grace_s: Seconds the leader gets to exit after SIGTERM (0: kill at once).

        Returns:
            The evidence; ``killed_after_grace`` is True when SIGKILL was needed. Its exit
            status is unknown only if the leader could not be reaped within the bound.
        """
        try:
            if self.running:
                self._signal_group(signal.SIGTERM)
                with trio.move_on_after(grace_s):
                    await self._exited.wait()
        finally:
            await self._kill_and_settle()
        return self._current_evidence()

    def kill_group_now(self) -> None:
        """SIGKILL the whole group at once, best effort; for emergency teardown (sync)."""
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        """Signal the group while its leader is unreaped, so the group id is surely ours.

        After the reap the watcher has already SIGKILLed the group; nothing is left to do.
        """
        if self._returncode is None and not self._finished.is_set():
            self._child.signal_group(signum)

    async def _kill_and_settle(self) -> None:
        """SIGKILL a leader that is still alive, then wait (shielded, bounded) for the end."""
        if self.running:
            self._killed_after_grace = True
            self._signal_group(signal.SIGKILL)
        with trio.move_on_after(_SETTLE_BOUND_S, shield=True):
            await self._finished.wait()

    async def _watch_exit(self) -> None:
        """The exit watcher: wait for the exit, then settle (even when cancelled)."""
        try:
            await self._child.wait_exiting()
            self._exited_at = trio.current_time()
        finally:
            with trio.move_on_after(_SETTLE_BOUND_S, shield=True):
                await self._settle()
            self._finish()

    async def _settle(self) -> None:
        """Kill the group, reap the leader, give the pipes `OUTPUT_DRAIN_S` to reach EOF."""
        if self._exited_at is None:  # the nursery was cancelled while the leader ran
            self._child.signal_group(signal.SIGKILL)
            with trio.move_on_after(REAP_BOUND_S):
                await self._child.wait_exiting()
                self._exited_at = trio.current_time()
            if self._exited_at is None:
                return
        self._child.signal_group(signal.SIGKILL)  # the leader is gone: its group goes too
        self._returncode = self._child.reap()
        self._exited.set()
        with trio.move_on_after(OUTPUT_DRAIN_S):
            await self._output_done.wait()
        self._output_scope.cancel()
        await self._output_done.wait()

    def _finish(self) -> None:
        """Build the evidence once and wake every waiter (also after a failed settle)."""
        if self._evidence is None:
            self._evidence = self._build_evidence()
        self._exited.set()
        self._finished.set()

    def _current_evidence(self) -> RunEvidence:
        return self._evidence if self._evidence is not None else self._build_evidence()

    def _build_evidence(self) -> RunEvidence:
        ended_at = self._exited_at if self._exited_at is not None else trio.current_time()
        return RunEvidence.from_run(
            args=self._args,
            pid=self._child.pid,
            returncode=self._returncode,
            elapsed_s=ended_at - self._started_at,
            stdout=self._stdout,
            stderr=self._stderr,
            killed_after_grace=self._kill_was_needed(),
        )

    def _kill_was_needed(self) -> bool:
        """True when a stop sent SIGKILL and the leader did die of it (or was never reaped).

        A leader that exited between the end of the grace and the SIGKILL was not killed.
        """
        return self._killed_after_grace and self._returncode in (None, -signal.SIGKILL)

    async def _pump_output(self) -> None:
        """Read stdout and stderr into their captures until EOF or until cancelled."""
        try:
            with self._output_scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_read_stream, self._child.stdout, self._stdout)
                    nursery.start_soon(_read_stream, self._child.stderr, self._stderr)
        finally:
            self._output_done.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._child.stdout)
                await trio.aclose_forcefully(self._child.stderr)


async def _read_stream(stream: trio.abc.ReceiveStream, capture: OutputCapture) -> None:
    """Feed ``stream`` into ``capture`` until end of file."""
    while True:
        try:
            chunk = await stream.receive_some(_READ_CHUNK_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        if not chunk:
            capture.mark_eof()
            return
        capture.feed(chunk)
