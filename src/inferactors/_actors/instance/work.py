"""The instance actor's workers: every piece of I/O an instance does.

Each worker runs as a task in the actor's nursery, reads only the immutable plan and
config, and posts its result to the actor's inbox (``_instance_msgs``), so the actor's loop
stays the only writer of the instance's state. This module holds the process's life
(spawn, exit, stop, readiness timer, unload) and the exposure watch; probing, readiness's
first token and deep health are `InstanceProbing` (``instance_probing``), its base class.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import trio

from ..._config.binding import spec_host
from ..._edges.log_ring import LogRing
from ..._edges.process import ManagedProcess
from ..._errors import BackendError, InferactorsError
from ..._models.registry import ModelRegistry
from ..._policy.launch import Launch
from ..._policy.probe_schedule import next_tick
from ..messages import ReplyTo
from .messages import (
    Exited,
    ExposureFound,
    PinChanged,
    ReadinessExpired,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    Stopped,
)
from .pins import PinHold, PinnedLaunch, pin_spawn
from .probing import InstanceProbing

RECORD_REFRESH_S = 1.0
"""Delay between refreshes of a running server's record (its process group's members)."""

EXPOSURE_CHECK_S = 0.2
"""Period of the exposure scans of a running managed server: with a scan (a share of one
kernel dump, under 1 ms) and the 3 s-grace stop's first signal, a listener on 0.0.0.0 is
stopped within 250 ms (issue 3). Every server scans on the same grid of trio time (multiples
of this period), so the runtime's socket table is dumped once per period for all of them
(issue 11 item 1)."""


@attrs.frozen
class InstanceWork(InstanceProbing):
    """The I/O of one instance; ``post`` is the actor's inbox; ``registry`` checks the
    model's pins at every spawn (None: nothing is pinned, for a bare actor); ``logs`` keeps
    every process's output lines (the instance's ring, across restarts; None: none kept)."""

    registry: ModelRegistry | None = None
    logs: LogRing | None = None

    # Process lifecycle.

    async def spawn(
        self, nursery: trio.Nursery, reply: ReplyTo[None], held: PinHold | None = None
    ) -> None:
        """Start the managed server unless its model fails its pins (checked at every spawn,
        issue 8; ``held``: the instance's hold, see `instance_pin`) or its port is taken
        (checklist items 47, 54). The server opens the verified descriptors; they stay open
        here until it is reaped, so the exposure watch can re-check them (`exposure_watch`).
        """
        launch = self.plan.launch
        assert launch is not None, "spawn is only for managed process plans"
        try:
            pinned = await pin_spawn(self.edges.file_work, self.registry, self.plan, held)
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
        this server if we die (FC-13). It runs after `Spawned` is posted, beside the server's
        start-up (issue 11): the leader is covered from the fork on by its parent-death
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
        """TERM the group, wait ``grace_s`` seconds, KILL the group, reap (checklist 48)."""
        evidence = await process.terminate(grace_s)
        await self._post(Stopped(process, evidence))

    async def readiness_timer(self, process: ManagedProcess, timeout_s: float) -> None:
        """Tell the actor when the readiness deadline of ``process`` passes."""
        await trio.sleep_until(process.started_at + timeout_s)
        await self._post(ReadinessExpired(process, timeout_s))

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

    # Exposure and the server's record.

    async def exposure_watch(
        self, process: ManagedProcess, scope: trio.CancelScope, pins: PinnedLaunch | None = None
    ) -> None:
        """Scan the server on every `EXPOSURE_CHECK_S` tick until it is found exposed or cancelled;
        every `RECORD_REFRESH_S`, re-check the verified files it serves (``pins``: an
        in-place write changes their stamp; `PinnedLaunch.changed`) and bring its record's
        group members up to date (issue 8 item 8: a forking wrapper's server is found again
        after a supervisor SIGKILL)."""
        refresh_at = trio.current_time()
        with scope:
            while True:
                exposure = await self._scan(process)
                if exposure is not None:
                    await self._post(ExposureFound(process, exposure))
                    return
                if trio.current_time() >= refresh_at and process.running:
                    refresh_at = trio.current_time() + RECORD_REFRESH_S
                    hold = pins.changed() if pins is not None else None
                    if hold is not None:
                        await self._post(PinChanged(process, hold))
                        return
                    process.track_descendants()  # a `setsid` wrapper's server: by pid
                    await self._refresh_record(process)
                await trio.sleep_until(next_tick(trio.current_time(), EXPOSURE_CHECK_S))

    async def _refresh_record(self, process: ManagedProcess) -> None:
        if self.plan.launch is not None:
            await self.edges.containment.refresh(self.plan.launch, process.pid)


def _start_error(launch: Launch, error: InferactorsError | OSError) -> InferactorsError:
    if isinstance(error, InferactorsError):
        return error
    return BackendError(f"cannot start {launch.program}: {error}")
