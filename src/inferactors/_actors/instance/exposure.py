"""The exposure watch of a running managed server: what it listens on, the verified files
it serves, and its record.

It scans the server's sockets for a listener beyond loopback when it starts, whenever the
host's listeners beyond loopback change (`NetScanner.listeners_changed`: the runtime reads
its LISTEN table every `EXPOSURE_CHECK_S` for all its watches and wakes them only on a
change) and every `RECORD_REFRESH_S`; at that refresh it also re-checks the verified
model files it serves (an in-place write changes their stamp) and, when the server's
tree changed shape or `RECORD_FORCED_S` passed, brings its record's group members up to
date. It posts what it found (`ExposureFound`, `PinChanged`) to the actor's inbox and ends; the
actor's rules (``step.py``) stop the server and hold it down.
"""

from __future__ import annotations

import math

import attrs
import trio

from ..._edges.bundle import Edges
from ..._edges.listen_watch import PERIOD_S
from ..._edges.process import ManagedProcess
from ..._policy.admission import Plan
from ..._policy.exposure import Exposure
from ..._policy.probe_schedule import next_tick
from ..mailbox import post
from .messages import ExposureFound, PinChanged
from .pins import PinnedLaunch

RECORD_REFRESH_S = 1.0
"""Period of the refreshes of a running server's record (its process group's members),
pinned files and descendants (float seconds). They fall on the ticks of the server's
probes (`probe_schedule.probe_phase`), so a quiet server's refresh shares a wake of the
loop with its probe."""

RECORD_FORCED_S = 10.0
"""The longest a running server's record goes without a refresh while its tree keeps the
same shape (``(pid, pgid)`` of each descendant, `ManagedProcess.tree_shape`; float
seconds). A tree of the same shape holds the same group members and outsiders, so the
refresh (a worker thread's read of the record and the tree: about 0.5 ms of CPU a second
on an idle host) is skipped; the forced one catches a pid reused in the tree between two
looks."""

EXPOSURE_CHECK_S = PERIOD_S
"""The longest gap between the runtime's reads of its LISTEN table while a managed server
runs (`listen_watch.PERIOD_S`, in a thread of its own): with the scan a change wakes and
the 3 s-grace stop's first signal, a listener on 0.0.0.0 is stopped within 250 ms. One
read serves every server of the runtime, and wakes their watches only when the listeners
beyond loopback changed."""


@attrs.frozen
class ExposureWatch:
    """The exposure watch of one managed instance; ``post`` is the actor's inbox. (Its
    worker keeps the name `exposure_watch`: a crash names the worker it came from.)"""

    plan: Plan
    edges: Edges
    post: trio.MemorySendChannel[object]
    tick_phase: float = 0.0
    """The phase of its refresh ticks: its probes' (`probe_schedule.probe_phase`)."""

    async def exposure_watch(
        self, process: ManagedProcess, scope: trio.CancelScope, pins: PinnedLaunch | None = None
    ) -> None:
        """Scan the server at its start, on each change of the host's listeners beyond
        loopback and every `RECORD_REFRESH_S`, until it is found exposed or cancelled; every
        `RECORD_REFRESH_S` also re-check the verified files it serves (``pins``: an
        in-place write changes their stamp; `PinnedLaunch.changed`) and bring its record's
        group members up to date (a forking wrapper's server is found again
        after a supervisor SIGKILL) when its tree changed shape, or `RECORD_FORCED_S` after
        the last refresh."""
        refresh_at = trio.current_time()
        recorded = _Recorded()
        generation = 0
        with scope:
            while True:
                exposure = await self._scan(process)
                if exposure is not None:
                    await post(self.post, ExposureFound(process, exposure))
                    return
                if trio.current_time() >= refresh_at:
                    refresh_at = next_tick(trio.current_time(), RECORD_REFRESH_S, self.tick_phase)
                    hold = pins.changed() if pins is not None and process.running else None
                    if hold is not None:
                        await post(self.post, PinChanged(process, hold))
                        return
                    if process.running:
                        process.track_descendants()  # a `setsid` wrapper's server: by pid
                        if recorded.due(process.tree_shape, trio.current_time()):
                            await self._refresh_record(process)
                generation = await self.edges.net.listeners_changed(generation, refresh_at)

    async def _refresh_record(self, process: ManagedProcess) -> None:
        if self.plan.launch is not None:
            await self.edges.containment.refresh(self.plan.launch, process.pid)

    async def _scan(self, process: ManagedProcess) -> Exposure | None:
        if not process.running:
            return None
        return await self.edges.net.scan(process.pid, self.plan.spec.port())


@attrs.define
class _Recorded:
    """The tree's shape at the last refresh of the record, and when (trio time)."""

    shape: frozenset[tuple[int, int]] | None = None
    at: float = -math.inf

    def due(self, shape: frozenset[tuple[int, int]] | None, now: float) -> bool:
        """Whether to refresh the record now (and note that it is refreshed): a new shape,
        no shape known (descendants not tracked), or `RECORD_FORCED_S` since the last."""
        if shape is not None and shape == self.shape and now - self.at < RECORD_FORCED_S:
            return False
        self.shape, self.at = shape, now
        return True
