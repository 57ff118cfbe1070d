"""Noticing a new listener beyond loopback on the host, once per tick for a whole runtime.

A managed server's exposure watch must see a listener its tree binds beyond loopback
within 250 ms, so the host's LISTEN table is read every `PERIOD_S`. Reading it is cheap;
waking every watch on every tick to scan its tree is not: on an idle 2-core host a scan
woken from sleep cost about 0.9 ms of CPU (cold caches and the scheduler's pass, ten times
the same scan run in a loop), five times a second per server.

`ListenerWatch.changed` lets every watch of a runtime sleep until that table changes. One
of the waiting tasks (whichever finds nobody reading) reads the table on trio's grid of
`PERIOD_S` and compares the listeners bound beyond loopback (address, port, inode, holder)
with its last read; when they differ, the generation moves on and every waiter returns
to scan its own tree. A quiet host costs one read per tick for the runtime and wakes one
task. The reader's read goes through the runtime's `SocketTable`, so the scans it wakes
answer from that same dump.
"""

from __future__ import annotations

import attrs
import trio

from .._config.binding import is_loopback_name
from .._policy.probe_schedule import next_tick
from .socket_table import SocketEntry, SocketTable

PERIOD_S = 0.2
"""Period of the table reads while anyone waits (float seconds): with the scan it wakes
(a share of the same dump) and a stop's first signal, a listener bound on 0.0.0.0 is
stopped within 250 ms. Reads fall on multiples of this period of trio time."""

_Key = tuple[str, int, int, "int | None"]


@attrs.define(eq=False)
class ListenerWatch:
    """Generations of the runtime's listeners beyond loopback; see the module notes.

    ``generation`` starts at 1 and moves on each time a read differs from the one
    before (the first read counts as a change), so 0 is a generation no caller has seen.
    """

    table: SocketTable
    period_s: float = PERIOD_S
    generation: int = 1
    _seen: frozenset[_Key] | None = None
    _reading: bool = False
    _moved: trio.Event = attrs.Factory(trio.Event)

    async def changed(self, generation: int, deadline: float) -> int:
        """Wait until the listeners beyond loopback differ from those of ``generation``, or
        until trio time ``deadline``; return the generation now (``generation`` itself
        when the deadline came first). A ``generation`` other than the current one returns
        at once (after a checkpoint). Never raises for the kernel's sake (`SocketTable`
        falls back to psutil); cancellation ends the wait, and a reader cancelled mid-tick
        hands the reading to another waiter."""
        await trio.lowlevel.checkpoint()
        while self.generation == generation and trio.current_time() < deadline:
            if self._reading:
                with trio.move_on_at(deadline):
                    await self._moved.wait()
            else:
                await self._read_until(generation, deadline)
        return self.generation

    async def _read_until(self, generation: int, deadline: float) -> None:
        """Read the table every tick until it changes or ``deadline``; then wake the other
        waiters (on a change, to return; else, for one of them to read on)."""
        self._reading = True
        try:
            with trio.move_on_at(deadline):
                while self.generation == generation:
                    await trio.sleep_until(next_tick(trio.current_time(), self.period_s))
                    self._note(await self.table.listeners(None, fresh=True))
        finally:
            self._reading = False
            self._wake()

    def _note(self, entries: tuple[SocketEntry, ...]) -> None:
        beyond = frozenset(
            (e.address, e.port, e.inode, e.pid) for e in entries if not is_loopback_name(e.address)
        )
        if beyond != self._seen:
            self._seen = beyond
            self.generation += 1

    def _wake(self) -> None:
        moved, self._moved = self._moved, trio.Event()
        moved.set()
