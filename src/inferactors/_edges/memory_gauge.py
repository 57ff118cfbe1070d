"""Measuring memory for the residency ledger: the machine's total and available memory,
and a server's process tree RSS (``tree_usage.py``), read with psutil (never by parsing
``/proc`` ourselves).

`MemoryGauge` is the Protocol the front door measures through; `PsutilGauge` is the real
one (each reading runs in a worker thread: a process tree's ``/proc`` reads take about a
millisecond), and ``inferactors.testing.FakeFleet.memory`` a fake whose figures follow
the fake servers, for MockClock tests.
"""

from __future__ import annotations

from typing import Protocol

import psutil
import trio

from .._policy.residency import Machine
from .tree_usage import tree_usage


class MemoryGauge(Protocol):
    """Where memory figures come from."""

    async def machine(self) -> Machine:
        """The machine's total and available memory now, bytes."""
        ...

    async def tree_rss(self, pid: int) -> int | None:
        """The resident set of the process ``pid`` and all its descendants, bytes; None
        when the process is gone or cannot be read."""
        ...


class PsutilGauge:
    """`MemoryGauge` on the real machine."""

    async def machine(self) -> Machine:
        """psutil's ``virtual_memory()``: ``total`` and ``available``."""
        memory = await trio.to_thread.run_sync(psutil.virtual_memory)
        return Machine(total=int(memory.total), available=int(memory.available))

    async def tree_rss(self, pid: int) -> int | None:
        """Sum of ``memory_info().rss`` over the process and its descendants (a child
        that ends while it is read is left out): `tree_usage.tree_usage`."""
        return await trio.to_thread.run_sync(_tree_rss, pid)


def _tree_rss(pid: int) -> int | None:
    used = tree_usage(pid)
    return None if used is None else used.rss_bytes
