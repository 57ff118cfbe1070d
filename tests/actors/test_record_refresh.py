"""A running managed server's record is refreshed when its tree changes shape, not every
second (``_actors/instance/exposure.py``): the refresh (a worker thread's read of the record
and the tree) was most of an idle server's cost. Under MockClock, with a stand-in process
whose tree shape the test sets and a containment that counts refreshes."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import attrs
import trio
import trio.testing

from actors.adopted_support import QuietNet
from actors.monitor_support import MODEL
from inferactors import InferenceSpec, InferFlavor, ServeArgs
from inferactors._actors.instance.exposure import (
    RECORD_FORCED_S,
    RECORD_REFRESH_S,
    ExposureWatch,
)
from inferactors._config.config import ControlMode
from inferactors._edges.process import ManagedProcess
from inferactors._policy.admission import Plan
from inferactors._policy.launch import Launch
from inferactors._policy.privilege import RunAs
from inferactors.testing import FakeFleet

Shape = frozenset[tuple[int, int]]


@attrs.define(eq=False)
class StandIn:
    """What the watch reads of a running server: its pid, its tree's shape, its looks."""

    pid: int = 4242
    running: bool = True
    tree_shape: Shape | None = frozenset({(4243, 4242)})
    looks: int = 0

    def track_descendants(self) -> tuple[int, ...]:
        self.looks += 1
        return ()


@attrs.define(eq=False)
class Counting:
    """A containment that only counts record refreshes (trio time of each)."""

    refreshes: list[float] = attrs.Factory(list)

    async def refresh(self, launch: Launch, pid: int) -> None:
        await trio.lowlevel.checkpoint()
        self.refreshes.append(trio.current_time())

    def euid(self) -> int:
        return 0

    async def prepare(self, launch: Launch, run_as: RunAs | None, files: object) -> None:
        await trio.lowlevel.checkpoint()

    async def record(self, launch: Launch, pid: int, port: int) -> None:
        await trio.lowlevel.checkpoint()

    async def forget(self, launch: Launch, pid: int) -> None:
        await trio.lowlevel.checkpoint()


def watch(containment: Counting) -> ExposureWatch:
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model=MODEL, serve=ServeArgs(port=8080)
    )
    launch = Launch(Path("/bin/true"), (), Path("/"), ())
    plan = Plan(spec=spec, mode=ControlMode.MANAGED, notes=(), launch=launch)
    edges = attrs.evolve(FakeFleet().edges(), net=QuietNet(), containment=containment)
    send, _ = trio.open_memory_channel[object](100)
    return ExposureWatch(plan, edges, send)


async def run_for(process: StandIn, containment: Counting, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            watch(containment).exposure_watch, cast(ManagedProcess, process), trio.CancelScope()
        )
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


async def test_a_quiet_tree_is_recorded_once_then_only_every_forced_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    process, containment = StandIn(), Counting()
    await run_for(process, containment, 2.5 * RECORD_FORCED_S)
    assert len(containment.refreshes) == 3  # at the start, then at 10 and 20 s
    assert process.looks >= 2.5 * RECORD_FORCED_S / RECORD_REFRESH_S - 1  # looked every second


async def test_a_tree_that_changes_shape_is_recorded_at_the_next_refresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    process, containment = StandIn(), Counting()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            watch(containment).exposure_watch, cast(ManagedProcess, process), trio.CancelScope()
        )
        await trio.sleep(3.5)
        assert len(containment.refreshes) == 1
        changed_at = trio.current_time()
        process.tree_shape = frozenset({(4243, 4242), (4250, 4250)})  # a child left the group
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    assert len(containment.refreshes) == 2
    assert 0 < containment.refreshes[1] - changed_at <= RECORD_REFRESH_S


async def test_a_server_whose_tree_is_not_tracked_is_recorded_every_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    process, containment = StandIn(tree_shape=None), Counting()
    await run_for(process, containment, 5.5)
    assert len(containment.refreshes) in (5, 6)
