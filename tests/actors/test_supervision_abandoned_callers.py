"""Callers that stop waiting for their answer must not kill the runtime.

Regression tests for bugs that the stateful test's faults reached (one managed instance on
a `FakeFleet` under MockClock, as there): a caller that gives up on a stop (a timeout), or
the supervisor's own restart cancelled by a stop while it spawns, made the actor's answer
raise ``trio.BrokenResourceError``, which killed the whole runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from actors.stateful_support import POLICY, SPEC, STOP_GRACE_S, SUPERVISION, outcome_of
from inferactors import InferConfig, InstanceState, InstanceStatus, RunEvidence
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._actors.serving import open_runtime
from inferactors._edges.bundle import Edges
from inferactors._edges.spawn import ChildProcess, OpenProcess
from inferactors._policy.privilege import RunAs
from inferactors.testing import FakeFleet

Scenario = Callable[[InferRuntime, InstanceHandle], Awaitable[None]]


@attrs.frozen
class SlowSpawns:
    """An `OpenProcess` edge whose spawns take ``delay_s`` seconds (a slow exec)."""

    inner: OpenProcess
    delay_s: float

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None = None,
        pass_fds: Sequence[int] = (),
    ) -> ChildProcess:
        await trio.sleep(self.delay_s)
        return await self.inner(argv, cwd=cwd, env=env, run_as=run_as, pass_fds=pass_fds)


async def runtime_death(config: InferConfig, edges: Edges, scenario: Scenario) -> object:
    """Run ``scenario`` on one loaded instance; what killed the runtime, else None."""
    died: object = None
    try:
        async with open_runtime(config, node_id="bugs", edges=edges) as runtime:
            await scenario(runtime, await runtime.load(SPEC, SUPERVISION))
    except* trio.BrokenResourceError as group:
        died = group
    return died


@pytest.mark.usefixtures("inline_threads")
async def test_a_caller_that_gives_up_on_a_stop_does_not_kill_the_runtime(
    make_config: Callable[[], InferConfig], autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(ignore_term=True)  # the stop takes its whole grace
    seen: list[InstanceStatus] = []

    async def scenario(runtime: InferRuntime, handle: InstanceHandle) -> None:
        await runtime.start(handle)
        with trio.move_on_after(1.0):
            await runtime.stop(handle, 5.0)  # the caller gives up after 1 s of 5
        await trio.sleep(10.0)
        seen.append(runtime.status(handle))

    died = await runtime_death(make_config(), fleet.edges(), scenario)
    assert died is None, f"the runtime died: {died!r}"
    assert [(s.state, s.stop_reason) for s in seen] == [(InstanceState.EXITED, "requested")]


@pytest.mark.usefixtures("inline_threads")
async def test_a_stop_during_a_restarts_spawn_stops_the_new_server(
    make_config: Callable[[], InferConfig], autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet()
    edges = fleet.edges()
    edges = attrs.evolve(edges, open_process=SlowSpawns(edges.open_process, 1.0))
    answers: list[object] = []

    async def scenario(runtime: InferRuntime, handle: InstanceHandle) -> None:
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        fleet.last.crash(exit_code=1)
        await trio.sleep(POLICY.base_s + 0.5)  # the restart is spawning (1 s)
        answers.append(await outcome_of(lambda: runtime.stop(handle, STOP_GRACE_S)))
        await trio.sleep(30.0)

    died = await runtime_death(make_config(), edges, scenario)
    assert died is None, f"the runtime died: {died!r}"
    [answer] = answers
    assert isinstance(answer, RunEvidence), answer
    assert len(fleet.children) == 2
    assert not fleet.live
