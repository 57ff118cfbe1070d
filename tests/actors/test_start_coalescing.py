"""Concurrent starts are one start, and a cancelled start is abandoned (issue 9 items 8, 9).

Real processes (the helper server, ``tests/helpers/runtime_server.py``) under a managed
runtime: every caller of concurrent starts gets the one outcome (the same success, the same
error), concurrent stops all get the run's evidence, and a caller cancelled mid-spawn
aborts the start (the server stopped once spawned: Exited, ``requested``, not counted)
unless another caller still waits, which then gets the outcome (``_actors/instance/step.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import trio

from actors.managed_support import (
    READY_S,
    Lab,
    chat,
    drain,
    exits,
    listening,
    ready,
    started,
    wait_gone,
)
from inferactors import (
    BackendError,
    InferactorsError,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    RunEvidence,
    StopReason,
    open_runtime,
)
from inferactors._edges.bundle import Edges
from inferactors._edges.spawn import ChildProcess, OpenProcess
from inferactors._policy.privilege import RunAs

SPAWN_S = 1.0
"""How long each spawn of the slow edge takes before the real one (a slow exec)."""


@attrs.frozen
class SlowSpawns:
    """The real `OpenProcess`, each spawn delayed by ``delay_s`` seconds."""

    inner: OpenProcess
    delay_s: float
    entered: trio.Event = attrs.Factory(trio.Event)
    """Set when the first spawn begins: a test cancels its caller mid-spawn, not before."""

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None = None,
        pass_fds: Sequence[int] = (),
    ) -> ChildProcess:
        self.entered.set()
        await trio.sleep(self.delay_s)
        return await self.inner(argv, cwd=cwd, env=env, run_as=run_as, pass_fds=pass_fds)


def slow_edges() -> Edges:
    edges = Edges()
    return attrs.evolve(edges, open_process=SlowSpawns(edges.open_process, SPAWN_S))


def spawn_begun(edges: Edges) -> trio.Event:
    """The event `SlowSpawns` sets when the spawn of ``edges`` begins."""
    assert isinstance(edges.open_process, SlowSpawns)
    return edges.open_process.entered


async def start_cancelled_mid_spawn(
    runtime: InferRuntime, handle: InstanceHandle, edges: Edges
) -> bool:
    """Start ``handle`` and give up once its (slow) spawn has begun; whether it was cancelled."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.start, handle)
            with trio.fail_after(READY_S):
                await spawn_begun(edges).wait()
            scope.cancel()
    return scope.cancelled_caught


async def outcomes_of_starts(runtime: InferRuntime, handle: InstanceHandle, n: int) -> list[object]:
    """Start ``handle`` from ``n`` callers at once; what each was answered."""
    outcomes: list[object] = []

    async def start() -> None:
        try:
            await runtime.start(handle)
        except InferactorsError as error:
            outcomes.append(error)
        else:
            outcomes.append(None)

    with trio.fail_after(READY_S):
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(start)
    return outcomes


async def test_concurrent_starts_all_succeed_with_one_server(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config(), edges=slow_edges()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        assert await outcomes_of_starts(runtime, handle, 3) == [None, None, None]
        await ready(runtime, handle)
        await runtime.stop(handle, 5.0)
    assert len(started(drain(events))) == 1


async def test_concurrent_starts_all_get_the_same_error(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config(), edges=slow_edges()) as runtime:
        handle = await runtime.load(chat(free_port))
        with listening(free_port):  # taken after admission: every start fails at spawn
            outcomes = await outcomes_of_starts(runtime, handle, 3)
    assert all(isinstance(outcome, BackendError) for outcome in outcomes), outcomes
    assert len({str(outcome) for outcome in outcomes}) == 1
    assert "is already taken by something else" in str(outcomes[0])


async def test_concurrent_stops_all_get_the_runs_evidence(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config()) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        answers: list[RunEvidence] = []

        async def stop() -> None:
            answers.append(await runtime.stop(handle, 5.0))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(stop)
    assert len(answers) == 3
    assert len({evidence.pid for evidence in answers}) == 1


async def test_a_cancelled_sole_caller_aborts_the_start(lab: Lab, free_port: int) -> None:
    edges = slow_edges()
    async with open_runtime(lab.config(), edges=edges) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        assert await start_cancelled_mid_spawn(runtime, handle, edges)
        with trio.fail_after(READY_S):
            status = await runtime.wait_state(handle, InstanceState.EXITED)
        assert (status.stop_reason, status.restarts, status.pid) == ("requested", 0, None)
        seen = drain(events)
        [spawned] = started(seen)
        assert [event.reason for event in exits(seen)] == [StopReason.REQUESTED]
        await wait_gone(spawned.pid)  # no process left
        await trio.sleep(1.0)
        assert (runtime.status(handle)).state is InstanceState.EXITED  # not restarted


async def test_with_two_callers_one_cancelled_the_other_gets_the_outcome(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config(), edges=slow_edges()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        answered: list[object] = []

        async def impatient() -> None:
            with trio.move_on_after(SPAWN_S / 3):
                await runtime.start(handle)
                answered.append("impatient")

        async def patient() -> None:
            await runtime.start(handle)
            answered.append("patient")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(impatient)
            nursery.start_soon(patient)
        assert answered == ["patient"]
        await ready(runtime, handle)
        assert exits(drain(events)) == []  # the start went on for the caller who waited
        await runtime.stop(handle, 5.0)
