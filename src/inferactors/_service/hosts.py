"""One runtime per (flavor, mode), each in a task of its own so that a reload can close
one (its settings changed) while the others go on: `RuntimeHost`, `open_host`.

A host's task opens the runtime (`open_runtime`), subscribes to its events and passes
each one to the fleet's ``on_event`` (synchronously, in that task) until it is told to
close; leaving `open_runtime` then stops its managed servers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from .._actors.runtime import InferRuntime
from .._actors.serving import open_runtime
from .._edges.bundle import Edges
from .._events import Event
from .._policy.reload_plan import Placement

EVENT_BUFFER = 1024
"""Events a host's subscription may fall behind before it loses some."""


class Say(Protocol):
    """How the fleet tells the operator something (the CLI logs it)."""

    def __call__(self, message: str, *, instance: str | None = None, level: int = ...) -> None:
        """One line: ``message``, about ``instance`` when given, at a logging ``level``."""


def say_nothing(message: str, *, instance: str | None = None, level: int = logging.INFO) -> None:
    """The default `Say`: nothing is said."""


@attrs.define(eq=False)
class RuntimeHost:
    """A running runtime and what it was built from; `close` ends it."""

    runtime: InferRuntime
    placement: Placement
    done: trio.Event = attrs.Factory(trio.Event)
    closed: trio.Event = attrs.Factory(trio.Event)

    def serves(self, placement: Placement) -> bool:
        """Whether ``placement`` runs in this runtime unchanged (same flavor, mode,
        runtime settings and node id)."""
        mine = self.placement
        return (
            mine.runtime_key == placement.runtime_key
            and mine.runtime == placement.runtime
            and mine.node_id == placement.node_id
        )

    async def close(self) -> None:
        """Close the runtime (its managed servers are stopped) and wait until it is."""
        self.done.set()
        await self.closed.wait()


async def open_host(
    nursery: trio.Nursery,
    placement: Placement,
    edges: Edges,
    on_event: Callable[[Event], None],
    stop_grace_s: float,
) -> RuntimeHost:
    """Open the runtime ``placement`` runs in, as a task of ``nursery``.

    Raises what `open_runtime` raises (`InvalidConfig`, `InvalidState` when another
    supervisor holds its data_root, `BackendError`).
    """
    host: RuntimeHost = await nursery.start(_serve_host, placement, edges, on_event, stop_grace_s)
    return host


async def _serve_host(
    placement: Placement,
    edges: Edges,
    on_event: Callable[[Event], None],
    stop_grace_s: float,
    *,
    task_status: trio.TaskStatus[RuntimeHost] = trio.TASK_STATUS_IGNORED,
) -> None:
    closed = trio.Event()
    try:
        async with open_runtime(
            placement.runtime,
            node_id=placement.node_id,
            edges=edges,
            stop_grace_s=stop_grace_s,
        ) as runtime:
            host = RuntimeHost(runtime, placement, closed=closed)
            events = await runtime.subscribe(EVENT_BUFFER)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, events, on_event)
                task_status.started(host)
                await host.done.wait()
                await runtime.stop_all(stop_grace_s)
                await trio.sleep(0.05)  # the last exits reach the fleet's followers
                nursery.cancel_scope.cancel()
    finally:
        closed.set()


async def _pump(
    events: trio.MemoryReceiveChannel[Event], on_event: Callable[[Event], None]
) -> None:
    with events:
        async for event in events:
            on_event(event)
