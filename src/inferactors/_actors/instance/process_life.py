"""The instance's process workers: the life of one managed server process.

Spawn (after the pin check, ``pins.py``), await its exit, stop it, time its readiness
deadline, wait for a start-up fault it hangs on, and unload. Each runs as a task in the
actor's nursery, reads only the immutable plan, and posts its result to the actor's inbox
(``messages.py``); the actor's rules (``step.py``) apply it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from ..._config.binding import spec_host
from ..._edges.bundle import Edges
from ..._edges.log_ring import LogRing
from ..._edges.loop_lag import lateness
from ..._edges.process import ManagedProcess
from ..._errors import BackendError, InferactorsError
from ..._events import Event
from ..._models.registry import ModelRegistry
from ..._policy.admission import Plan
from ..._policy.launch import Launch
from ..mailbox import post
from ..messages import ReplyTo
from .messages import (
    Exited,
    Internal,
    ReadinessExpired,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    StartupFault,
    Stopped,
)
from .pins import PinHold, PinnedLaunch, pin_spawn
from .progress import HashWatch, report_hashing


@attrs.frozen
class ProcessLife:
    """The process workers of one managed instance; ``post`` is the actor's inbox;
    ``registry`` checks the model's pins at every spawn (None: nothing is pinned, for a
    bare actor); ``logs`` keeps every process's output lines (the instance's ring, across
    restarts; None: none kept)."""

    plan: Plan
    edges: Edges
    post: trio.MemorySendChannel[object]
    registry: ModelRegistry | None = None
    logs: LogRing | None = None
    emit: Callable[[Event], None] | None = None
    """Where progress events go (`WorkProgress` of a re-hash at spawn); None: nowhere."""
    instance_id: str = ""
    """The instance the progress events name."""

    async def _post(self, message: Internal) -> None:
        await post(self.post, message)

    async def spawn(
        self, nursery: trio.Nursery, reply: ReplyTo[None], held: PinHold | None = None
    ) -> None:
        """Start the managed server unless its model fails its pins (checked at every spawn;
        ``held``: the instance's hold, see ``pins.py``) or its port is taken. The server
        opens the verified descriptors; they stay open
        here until it is reaped, so the exposure watch can re-check them (`exposure_watch`).
        """
        launch = self.plan.launch
        assert launch is not None, "spawn is only for managed process plans"
        try:
            pinned = await self._pin(held)
        except (InferactorsError, OSError) as error:
            await self._post(SpawnFailed(_start_error(launch, error), reply))
            return
        if isinstance(pinned, PinHold):
            await self._post(SpawnFailed(pinned.error, reply, pinned))
            return
        with pinned:  # open for the server's whole life: closed once it is reaped
            try:
                process = await self._start(nursery, pinned.launch)
            except (InferactorsError, OSError) as error:
                await self._post(SpawnFailed(_start_error(launch, error), reply))
                return
            await self._post(Spawned(process, reply, pinned))  # ProcessStarted: not after I/O
            await self._record(process, pinned.launch)
            await process.wait_exited()
            await self.edges.containment.forget(pinned.launch, process.pid)  # after the record

    async def _pin(self, held: PinHold | None) -> PinnedLaunch | PinHold:
        """`pin_spawn`, its re-hash reported as `WorkProgress` meanwhile (``progress.py``)."""
        work, registry, plan = self.edges.file_work, self.registry, self.plan
        if self.emit is None:
            return await pin_spawn(work, registry, plan, held)
        watch = HashWatch()
        async with trio.open_nursery() as reporting:
            reporting.start_soon(report_hashing, watch, self.emit, self.instance_id)
            try:
                return await pin_spawn(work, registry, plan, held, watch)
            finally:
                reporting.cancel_scope.cancel()

    async def _start(self, nursery: trio.Nursery, launch: Launch) -> ManagedProcess:
        spec = self.plan.spec
        if await self.edges.port_in_use(spec_host(spec), spec.port()):
            raise BackendError(
                f"{spec.base_url()} is already taken by something else; not starting over it"
            )
        files, run_as = self.plan.weight_files, self.plan.run_as
        await self.edges.containment.prepare(launch, run_as, files)
        spawn = self.edges.open_process
        return await ManagedProcess.spawn(
            nursery, launch, open_process=spawn, run_as=run_as, log=self.logs
        )

    async def _record(self, process: ManagedProcess, launch: Launch) -> None:
        """Write ``server.json`` (with the argv executed, ``launch``) so a later life can reap
        this server if we die. It runs after `Spawned` is posted, beside the server's
        start-up: the leader is covered from the fork on by its parent-death
        signal, and the record, for what it forks, reaches the disk as soon as before
        (``design/supervision.md``). A record that cannot be written is only a missing
        safety net: the server runs (`Containment.record` never raises for it)."""
        await self.edges.containment.record(launch, process.pid, self.plan.spec.port())

    async def watch_exit(self, process: ManagedProcess) -> None:
        """Await the process's exit and report it the moment it happens. Its record
        (``server.json``) is dropped by `spawn`, after the record's write, never before."""
        evidence = await process.wait_exited()
        await self._post(Exited(process, evidence))

    async def stop(self, process: ManagedProcess, grace_s: float) -> None:
        """TERM the group, wait ``grace_s`` seconds, KILL the group, reap."""
        evidence = await process.terminate(grace_s)
        await self._post(Stopped(process, evidence))

    async def readiness_timer(
        self, process: ManagedProcess, timeout_s: float, deadline: float | None = None
    ) -> None:
        """Tell the actor when the readiness deadline of ``process`` passes (trio time
        ``deadline``; None: ``timeout_s`` after its spawn), with the time our own loop lost
        since this timer began (`loop_lag.lateness`)."""
        began = trio.current_time()
        if deadline is None:
            began, deadline = process.started_at, process.started_at + timeout_s
        await trio.sleep_until(deadline)
        lost_s = lateness(began, deadline).ours_s
        await self._post(ReadinessExpired(process, timeout_s, lost_s))

    async def shutdown(
        self,
        process: ManagedProcess | None,
        grace_s: float,
        instance_dir: Path | None,
        reply: ReplyTo[None],
    ) -> None:
        """Unload: stop a running server, delete the instance directory, end the actor."""
        if process is not None and process.running:
            evidence = await process.terminate(grace_s)
            await self._post(Exited(process, evidence))
        if instance_dir is not None:
            await trio.to_thread.run_sync(shutil.rmtree, instance_dir, True)  # errors ignored
        await self._post(ShutdownDone(reply))

    async def watch_startup(self, process: ManagedProcess) -> None:
        """Wait for ``process`` to print a fault it hangs on (`LineWatch.wait_fatal`), then
        tell the actor (`StartupFault`); cancelled with the process's other tasks."""
        diagnosis = await process.lines.wait_fatal()
        await self._post(StartupFault(process, diagnosis))


def _start_error(launch: Launch, error: InferactorsError | OSError) -> InferactorsError:
    if isinstance(error, InferactorsError):
        return error
    return BackendError(f"cannot start {launch.program}: {error}")
