"""The process edge: start a managed server in its own process group and take it down again.

`ManagedProcess.spawn` starts a server (llama-server, mlx_lm.server) from a launch
description; `ManagedProcess.terminate` stops it:

- the child runs in a new session, so its process group id equals its pid and every signal
  goes to the whole group (a wrapper that forks cannot hide a grandchild);
- stdin is ``/dev/null``; stdout and stderr are read line by line (`LineWatch`): into the
  evidence (`OutputCapture`), the instance's ring (`LineSink`) and, until it is
  Running, a fault it may hang on;
- the child gets resource limits, drops to ``run_as`` when one is given, and on Linux gets
  ``PR_SET_PDEATHSIG`` = SIGKILL, so a supervisor killed with SIGKILL does not leave a
  server behind. That child setup, and why the fork happens in the trio thread, is
  in ``spawn.py``;
- stopping is llama-swap's numbered kill steps: 1. SIGTERM the group, 2. wait the grace,
  3. SIGKILL the group, 4. wait for the exit. Each SIGTERM is followed at
  once by a SIGCONT, as systemd does: a server stopped by SIGSTOP/SIGTSTP would otherwise
  never handle it and be killed after the whole grace. The grace is the whole
  group's: a wrapper that forks without exec dies of the SIGTERM at once
  while its server is still shutting down, so after the leader's exit the stop waits for
  the rest of the group until the grace is spent, and only then sends SIGKILL. The leader
  stays unreaped (a zombie) meanwhile, which keeps the group id ours. Descendants that
  left the group (``setsid``, a daemon's double fork) share its steps: found by its
  cgroup right before a stop, or without one by tree and session about once a second and
  right before a stop (``descendants.py``, ``descendant_looks.py``),
  killed with ``cgroup.kill`` where there is a cgroup; the evidence and the log say which
  survived the grace and were killed;
- when the leader exits on its own its group is killed at once, so no grandchild outlives
  it, and if the nursery that runs the process's tasks is cancelled, the
  group is killed and reaped (item 61).

Cleanup after an exit or during a stop runs in scopes shielded *and* bounded
(``trio.move_on_after(bound, shield=True)``): no process left behind, no hang either.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
from pathlib import Path
from typing import Protocol

import attrs
import trio

from .._errors import BackendError
from .._policy.privilege import RunAs
from .capture import RunEvidence
from .descendant_looks import DescendantLooks
from .descendants import Descendants
from .output_lines import LineSink, LineWatch, read_stream
from .spawn import CHILD_RLIMITS as CHILD_RLIMITS
from .spawn import ChildProcess as ChildProcess
from .spawn import OpenProcess as OpenProcess
from .spawn import PosixChild as PosixChild
from .spawn import clamp_limit as clamp_limit
from .spawn import open_child_process as open_child_process

OUTPUT_DRAIN_S = 2.0
"""How long, after the leader's exit, the pipes get to reach end of file (seconds)."""

REAP_BOUND_S = 5.0
"""How long a SIGKILLed leader gets to be reaped before we give up waiting (seconds)."""

_SETTLE_BOUND_S = REAP_BOUND_S + OUTPUT_DRAIN_S + 1.0

GROUP_POLL_S = 0.02
"""How often a stop whose leader has exited looks whether the rest of its group is gone (s)."""


class LaunchLike(Protocol):
    """What `ManagedProcess.spawn` reads from a launch description (``launch.Launch``)."""

    @property
    def program(self) -> Path: ...
    @property
    def args(self) -> tuple[str, ...]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...


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
    _exited: trio.Event = attrs.field(factory=trio.Event)
    _output_done: trio.Event = attrs.field(factory=trio.Event)
    _finished: trio.Event = attrs.field(factory=trio.Event)
    _output_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _returncode: int | None = None
    _exited_at: float | None = None
    _killed_after_grace: bool = False
    _group_outlived_grace: bool = False
    _stop_deadline: float | None = None
    _evidence: RunEvidence | None = None
    _descendants: Descendants | None = None
    _looks: DescendantLooks | None = None
    _survivors: tuple[int, ...] = ()
    lines: LineWatch = attrs.Factory(LineWatch)  # the start-up reading of its output

    @classmethod
    async def spawn(
        cls,
        nursery: trio.Nursery,
        launch: LaunchLike,
        *,
        open_process: OpenProcess = open_child_process,
        run_as: RunAs | None = None,
        log: LineSink | None = None,
    ) -> ManagedProcess:
        """Start ``launch`` and watch it from tasks in ``nursery``.

        Args:
            nursery: Runs the exit watcher and the output pump until the process is gone.
            launch: Program, args, working directory and the *whole* environment (nothing
                is inherited from ours), and, when it has ``pass_fds``, the descriptors the
                server inherits (the verified model files, still open in the caller).
            open_process: The spawn function; tests and higher layers may inject a fake.
            run_as: Run the server as this user; None
                keeps ours. Refusing root without it is `require_unprivileged`'s job, and
                handing over the instance directory `prepare_instance_dir`'s (both in
                ``containment.py``), done before the spawn.
            log: Where its output lines go besides the evidence (the instance's ring).

        Raises:
            BackendError: the program could not be started (missing, not executable by
                ``run_as``, bad cwd, a user switch we may not make, a failed child setup);
                the message names the program.
        """
        argv = (str(launch.program), *launch.args)
        try:
            child = await open_process(
                argv, cwd=launch.cwd, env=dict(launch.env), run_as=run_as, **_passed(launch)
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise BackendError(f"cannot start {launch.program}: {error}") from error
        process = cls(child, launch.args, trio.current_time())
        process.lines.sink, process.lines.pid = log, child.pid
        if isinstance(child, PosixChild) and hasattr(os, "pidfd_open"):
            process._descendants = Descendants(child.pid, child.pid, child.cgroup)
            looks = process._looks = DescendantLooks(process._descendants)
            if child.cgroup is None:  # a cgroup holds them all: no need to look meanwhile
                name = f"inferactors descendants {child.pid}"
                nursery.start_soon(looks.on_timer, process._exited, name=name)
        nursery.start_soon(process._watch_exit, name=f"inferactors exit watcher {child.pid}")
        nursery.start_soon(process._pump_output, name=f"inferactors output {child.pid}")
        if isinstance(child, PosixChild) and child.startup_slot is not None:
            ready = functools.partial(process.lines.wait_ready, 0)
            hold = child.startup_slot.hold_until
            nursery.start_soon(hold, ready, process._exited.wait, name="inferactors start-up")
        return process

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments it was started with (after the program), as executed."""
        return self._args

    @property
    def pid(self) -> int:
        """The leader's process id."""
        return self._child.pid

    @property
    def pgid(self) -> int:
        """The process group id; equal to `pid`, since the leader starts a new session."""
        return self._child.pid

    @property
    def cgroup(self) -> Path | None:
        """The directory of its cgroup (``cgroups.py``), None where the host delegates none."""
        cgroup = getattr(self._child, "cgroup", None)
        return None if cgroup is None else Path(cgroup.path)

    @property
    def tree_shape(self) -> frozenset[tuple[int, int]] | None:
        """``(pid, pgid)`` of the server's descendants at the last `track_descendants`
        (`Escapees.shape`); None where they are not tracked (no pidfds)."""
        return None if self._descendants is None else self._descendants.shape

    @property
    def escaped(self) -> tuple[int, ...]:
        """The live descendants tracked outside our group (see `track_descendants`)."""
        return () if self._descendants is None else self._descendants.alive()

    def track_descendants(self) -> tuple[int, ...]:
        """Track (pidfds) the descendants that left our group; return the live ones. On
        each record refresh, identity check and stop, and (without a cgroup) when nobody
        looked for a while (``descendant_looks.py``); 0.1 to 0.7 ms (the server's tree and
        its cgroup, ``descendants.py``)."""
        if self._looks is None or not self.running:
            return self.escaped
        return self._looks.look()

    def _track_adopted(self) -> None:
        """`track_descendants`, with the orphans this process adopted from the server."""
        if self._descendants is not None:
            self._descendants.track_adopted()

    async def _watch_grace(self) -> None:
        """Wait for the leader's exit, looking for new descendants meanwhile
        (`DescendantLooks.through_grace`)."""
        if self._looks is None:
            await self._exited.wait()
        else:
            await self._looks.through_grace(self._exited)

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

        The grace is the group's: when the leader exits first (a wrapper that forked its
        server), the rest of the group gets what is left of ``grace_s`` before the SIGKILL.

        Safe to call after the process exited, or twice: it then signals nothing and returns
        the evidence. If the task is cancelled during the grace period, the group is SIGKILLed
        at once and reaped (shielded, bounded by `REAP_BOUND_S` + `OUTPUT_DRAIN_S` + 1 s)
        before `trio.Cancelled` propagates.

        Args:
            grace_s: Seconds the group gets to exit after SIGTERM (0: kill at once).

        Returns:
            The evidence; ``killed_after_grace`` is True when SIGKILL was needed (for the
            leader or the rest of its group). Its exit status is unknown only if the leader
            could not be reaped within the bound.
        """
        try:
            if self.running:
                deadline = trio.current_time() + grace_s
                if self._stop_deadline is None or deadline < self._stop_deadline:
                    self._stop_deadline = deadline
                self._track_adopted()
                self._signal_group(signal.SIGTERM)
                self._signal_group(signal.SIGCONT)  # a stopped server must run to handle it
                with trio.move_on_after(grace_s):
                    await self._watch_grace()
        finally:
            await self._kill_and_settle()
        return self._current_evidence()

    def kill_group_now(self) -> None:
        """SIGKILL the whole group at once, best effort; for emergency teardown (sync)."""
        self._signal_group(signal.SIGKILL)

    def _anything_alive(self) -> bool:
        outside = self._descendants is not None and self._descendants.anything_alive()
        return self._child.group_alive() or outside

    def _signal_group(self, signum: int) -> None:
        """Signal the group while its leader is unreaped, so the group id is surely ours,
        and the descendants that left it, through their pidfds (never a reused pid).

        After the reap the watcher has already SIGKILLed the group; nothing is left to do.
        """
        if self._returncode is None and not self._finished.is_set():
            self._child.signal_group(signum)
        if self._descendants is None:
            return
        if signum == signal.SIGKILL:
            self._descendants.kill()
        else:
            self._descendants.signal(signum)

    async def _kill_and_settle(self) -> None:
        """SIGKILL a group that is still alive, then wait (shielded, bounded) for the end."""
        if self.running:
            self._killed_after_grace = True
            if self._exited_at is not None and self._anything_alive():
                self._group_outlived_grace = True  # the leader went; its server did not
            self._signal_group(signal.SIGKILL)
        with trio.move_on_after(_SETTLE_BOUND_S, shield=True):
            await self._finished.wait()

    async def _watch_exit(self) -> None:
        """The exit watcher: wait for the exit, then settle (even when cancelled)."""
        try:
            await self._child.wait_exiting()
            self._exited_at = trio.current_time()
            self._track_adopted()  # what it orphaned at its exit went to us, if to anyone
            await self._wait_for_group()
        finally:
            with trio.move_on_after(_SETTLE_BOUND_S, shield=True):
                await self._settle()
            self._finish()

    async def _wait_for_group(self) -> None:
        """During a stop, let the rest of the group finish within the stop's grace.

        Polls every `GROUP_POLL_S` until no live process is left in the group or the
        grace is spent; the leader is not reaped meanwhile, so its group id cannot be
        reused. Without a stop (the leader exited on its own) it returns at once, and the
        group is SIGKILLed.
        """
        if self._stop_deadline is None:
            return
        with trio.move_on_at(self._stop_deadline):
            while self._anything_alive():  # noqa: ASYNC110  no event tells of /proc
                await trio.sleep(GROUP_POLL_S)
            return
        if self._anything_alive():  # the grace is spent: `_settle` SIGKILLs the rest
            self._killed_after_grace = self._group_outlived_grace = True

    async def _settle(self) -> None:
        """Kill the group, reap the leader, give the pipes `OUTPUT_DRAIN_S` to reach EOF."""
        if self._exited_at is None:  # the nursery was cancelled while the leader ran
            self._signal_group(signal.SIGKILL)
            with trio.move_on_after(REAP_BOUND_S):
                await self._child.wait_exiting()
                self._exited_at = trio.current_time()
            if self._exited_at is None:
                return
        self._signal_group(signal.SIGKILL)  # the leader is gone: its group (and escapees) too
        with trio.move_on_after(REAP_BOUND_S):  # the zombie leader keeps the group id ours
            while self._child.group_alive():  # noqa: ASYNC110  no event tells of /proc
                await trio.sleep(GROUP_POLL_S)
        self._returncode = self._child.reap()
        self._exited.set()
        await self._wait_descendants()
        with trio.move_on_after(OUTPUT_DRAIN_S):
            await self._output_done.wait()
        self._output_scope.cancel()
        await self._output_done.wait()

    async def _wait_descendants(self) -> None:
        """Give the SIGKILLed outsiders `REAP_BOUND_S` to go; the rest are the survivors."""
        if self._descendants is not None:
            self._survivors = await self._descendants.settle(REAP_BOUND_S, GROUP_POLL_S)

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
            stdout=self.lines.stdout.capture,
            stderr=self.lines.stderr.capture,
            killed_after_grace=self._kill_was_needed(),
            escaped=() if self._descendants is None else self._descendants.seen,
            killed=() if self._descendants is None else self._descendants.killed,
            survivors=self._survivors,
        )

    def _kill_was_needed(self) -> bool:
        """True when a stop sent SIGKILL and the leader did die of it (or was never reaped),
        or the rest of its group was still alive when the grace was spent.

        A leader that exited between the end of the grace and the SIGKILL was not killed.
        """
        leader_killed = self._returncode in (None, -signal.SIGKILL)
        return self._killed_after_grace and (leader_killed or self._group_outlived_grace)

    async def _pump_output(self) -> None:
        """Read stdout and stderr into their captures until EOF or until cancelled."""
        try:
            with self._output_scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_stream, self._child.stdout, self.lines.stdout)
                    nursery.start_soon(read_stream, self._child.stderr, self.lines.stderr)
        finally:
            self._output_done.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._child.stdout)
                await trio.aclose_forcefully(self._child.stderr)


def _passed(launch: LaunchLike) -> dict[str, tuple[int, ...]]:
    """``pass_fds`` for the opener when the launch has some (a `LaunchLike` may have none)."""
    fds: tuple[int, ...] = getattr(launch, "pass_fds", ())
    return {"pass_fds": fds} if fds else {}
