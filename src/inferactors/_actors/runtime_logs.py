"""`InferRuntime`'s window on its servers' output: `RuntimeLogs`, a mixin.

The lines are in each instance's ring (``_edges/log_ring``), which the instance's spawns
feed and the runtime's `Edges.logs` holds by instance id, so reading them sends no message
and never waits on an actor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import trio

from .._edges.bundle import Edges
from .._edges.log_ring import FOLLOW_BUFFER, LogLine, LogRing
from .._errors import InvalidConfig, UnknownInstance


class InstanceHandle(Protocol):
    """What these methods read of an `InferRuntime` handle (``runtime.InstanceHandle``)."""

    @property
    def instance_id(self) -> str: ...


class RuntimeLogs:
    """The output methods of `InferRuntime` (which provides ``_edges``)."""

    _edges: Edges

    def logs(self, handle: InstanceHandle, lines: int) -> tuple[LogLine, ...]:
        """The last ``lines`` lines its managed servers wrote (stdout and stderr, oldest
        first, across restarts; a probe's log line is counted, not kept). No I/O.

        Raises:
            UnknownInstance: the instance was never loaded here.
            InvalidConfig: ``lines`` is negative.
        """
        if lines < 0:
            raise InvalidConfig(f"lines must not be negative, got {lines}")
        return self._ring(handle).tail(lines)

    def probe_lines(self, handle: InstanceHandle) -> int:
        """How many lines its servers wrote about our probes (counted, not kept)."""
        return self._ring(handle).probe_lines

    @contextlib.contextmanager
    def follow_logs(
        self, handle: InstanceHandle, buffer: int = FOLLOW_BUFFER
    ) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
        """Every line its servers write from now on, until the block is left. A reader
        more than ``buffer`` lines behind loses lines, and then gets a marker line saying
        how many; the servers' readers never wait for it.

        Raises:
            UnknownInstance: the instance was never loaded here.
        """
        with self._ring(handle).follow(buffer) as lines:
            yield lines

    def _ring(self, handle: InstanceHandle) -> LogRing:
        ring = self._edges.logs.get(handle.instance_id)
        if ring is None:
            raise UnknownInstance(f"{handle.instance_id} is not loaded")
        return ring
