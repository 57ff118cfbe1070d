"""The exposure watch of a running managed server: what it listens on, the verified files
it serves, and its record.

On every `EXPOSURE_CHECK_S` tick it scans the server's sockets for a listener beyond
loopback; every `RECORD_REFRESH_S` it re-checks the verified model files it serves (an
in-place write changes their stamp) and brings its record's group members up to date. It
posts what it found (`ExposureFound`, `PinChanged`) to the actor's inbox and ends; the
actor's rules (``step.py``) stop the server and hold it down.
"""

from __future__ import annotations

import attrs
import trio

from ..._edges.bundle import Edges
from ..._edges.process import ManagedProcess
from ..._policy.admission import Plan
from ..._policy.exposure import Exposure
from ..._policy.probe_schedule import next_tick
from ..mailbox import post
from .messages import ExposureFound, PinChanged
from .pins import PinnedLaunch

RECORD_REFRESH_S = 1.0
"""Delay between refreshes of a running server's record (its process group's members)."""

EXPOSURE_CHECK_S = 0.2
"""Period of the exposure scans of a running managed server: with a scan (a share of one
kernel dump, under 1 ms) and the 3 s-grace stop's first signal, a listener on 0.0.0.0 is
stopped within 250 ms. Every server scans on the same grid of trio time (multiples
of this period), so the runtime's socket table is dumped once per period for all of them.
"""


@attrs.frozen
class ExposureWatch:
    """The exposure watch of one managed instance; ``post`` is the actor's inbox. (Its
    worker keeps the name `exposure_watch`: a crash names the worker it came from.)"""

    plan: Plan
    edges: Edges
    post: trio.MemorySendChannel[object]

    async def exposure_watch(
        self, process: ManagedProcess, scope: trio.CancelScope, pins: PinnedLaunch | None = None
    ) -> None:
        """Scan the server on every `EXPOSURE_CHECK_S` tick until it is found exposed or cancelled;
        every `RECORD_REFRESH_S`, re-check the verified files it serves (``pins``: an
        in-place write changes their stamp; `PinnedLaunch.changed`) and bring its record's
        group members up to date (a forking wrapper's server is found again
        after a supervisor SIGKILL)."""
        refresh_at = trio.current_time()
        with scope:
            while True:
                exposure = await self._scan(process)
                if exposure is not None:
                    await post(self.post, ExposureFound(process, exposure))
                    return
                if trio.current_time() >= refresh_at and process.running:
                    refresh_at = trio.current_time() + RECORD_REFRESH_S
                    hold = pins.changed() if pins is not None else None
                    if hold is not None:
                        await post(self.post, PinChanged(process, hold))
                        return
                    process.track_descendants()  # a `setsid` wrapper's server: by pid
                    await self._refresh_record(process)
                await trio.sleep_until(next_tick(trio.current_time(), EXPOSURE_CHECK_S))

    async def _refresh_record(self, process: ManagedProcess) -> None:
        if self.plan.launch is not None:
            await self.edges.containment.refresh(self.plan.launch, process.pid)

    async def _scan(self, process: ManagedProcess) -> Exposure | None:
        if not process.running:
            return None
        return await self.edges.net.scan(process.pid, self.plan.spec.port())
