"""Opening a fleet (`open_fleet`): the run file's front door bound before anything starts,
one runtime opened per placement, every instance admitted (loaded and started in the
background, concurrently: one slow server delays no other), the scheduler and the front
door opened, and the operator told once every first start is over. Leaving it closes the
fleet (`Fleet.close`) within a bound. What the running fleet shows and does is the `Fleet`
(``fleet.py``); split from it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import attrs
import trio

from .._config.runfile import Endpoint, RunConfig
from .._config.state_dir import state_dir_of
from .._edges.bundle import Edges, ProbeTimed
from .._edges.memory_gauge import MemoryGauge
from .._policy.reload_plan import placements
from .fleet import Fleet
from .fleet_front_door import bind_front_door
from .hosts import Say, say_nothing
from .metrics import FleetMetrics
from .ui_history import sample_usage

__all__ = ["CLOSE_MARGIN_S", "STOP_GRACE_S", "open_fleet"]

STOP_GRACE_S = 10.0
"""Grace between SIGTERM and SIGKILL for each managed server, float seconds."""
CLOSE_MARGIN_S = 10.0
"""Time allowed beyond the stop grace for closing the whole fleet, float seconds."""


@contextlib.asynccontextmanager
async def open_fleet(
    config: RunConfig,
    run_file: Path,
    *,
    say: Say = say_nothing,
    stop_grace_s: float = STOP_GRACE_S,
    edges: Edges | None = None,
    gauge: MemoryGauge | None = None,
    reserved: Sequence[Endpoint] = (),
) -> AsyncIterator[Fleet]:
    """Supervise every instance of ``config`` (read from ``run_file``) for the block.

    The runtimes are open when the block begins; every instance is being loaded and
    started in the background (`Fleet.settled` tells when that is over). ``say`` hears
    what the fleet has to tell the operator (started, refused, first deep health).
    ``edges`` replaces the I/O edges of every runtime (its ``on_probe`` is the metrics');
    ``gauge`` the scheduler's memory gauge (psutil's by default), which runs when the run
    file has a front door, on-demand instances or a ``[residency]`` table (``fleet_door.py``).
    The run file's ``[front_door]`` is bound before any instance is loaded and served over
    the scheduler while the fleet runs (``fleet_front_door.py``; its URL is said).
    ``reserved`` names the addresses the supervisor listens on itself (no instance may use
    one, now or after a reload).
    Leaving the block (even by cancellation) stops every managed server (SIGTERM,
    ``stop_grace_s`` float seconds, SIGKILL) and closes the runtimes.

    Raises:
        InvalidConfig: no instances, an instance on a ``reserved`` address, a runtime's
            settings are malformed, or the front door's address cannot be bound.
        InvalidState: another supervisor holds a data_root.
        BackendError: a data_root cannot be made.
    """
    config.require_instances()
    for endpoint in reserved:
        endpoint.check(config)
    try:
        opened = _fleet_of(config, run_file, say, stop_grace_s, edges, gauge, tuple(reserved))
        async with opened as fleet:
            yield fleet
    except BaseExceptionGroup as group:
        raise _single(group) from None


@contextlib.asynccontextmanager
async def _fleet_of(
    config: RunConfig,
    run_file: Path,
    say: Say,
    stop_grace_s: float,
    edges: Edges | None,
    gauge: MemoryGauge | None,
    reserved: tuple[Endpoint, ...],
) -> AsyncIterator[Fleet]:
    wanted = placements(config)
    metrics = FleetMetrics.create()
    made: list[Fleet] = []

    def on_probe(timed: ProbeTimed) -> None:
        made[0].on_probe(timed)

    edges = attrs.evolve(edges or Edges(), on_probe=on_probe)
    front = config.front_door
    listener = None if front is None else bind_front_door(front)  # before anything starts
    async with trio.open_nursery() as nursery:
        fleet = Fleet(
            run_file, state_dir_of(config), say, metrics, edges, stop_grace_s, nursery, reserved
        )
        fleet.gauge = gauge
        made.append(fleet)
        try:
            for name, placement in wanted.items():
                host = fleet.host_for(placement) or await fleet.open_host(placement)
                fleet.admit(name, placement, host)
            nursery.start_soon(_say_when_started, fleet)
            nursery.start_soon(sample_usage, fleet.views, fleet.history)
            fleet.open_door(config)
            if front is not None and listener is not None:
                taken, listener = listener, None  # serve_front_door closes it from now on
                await fleet.serve_front_door(front, taken)
            yield fleet
        finally:
            if listener is not None:
                listener.close()  # never served: the start failed before
            with trio.move_on_after(stop_grace_s + CLOSE_MARGIN_S, shield=True):
                await fleet.close()
            nursery.cancel_scope.cancel()


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


async def _say_when_started(fleet: Fleet) -> None:
    for member in list(fleet.members.values()):
        await member.first_done.wait()
    if fleet.closing:
        return  # start-up was cut short, not waited out
    views = fleet.views()
    up = sum(1 for view in views if view.refused is None and not fleet.members[view.name].retrying)
    retrying = sum(1 for member in fleet.members.values() if member.retrying)
    more = f"; {retrying} adopted server(s) not answering, retried" if retrying else ""
    fleet.say(f"supervising {up} of {len(views)} instance(s){more}; Ctrl-C stops")
