"""Crash timing under trio's MockClock(autojump_threshold=0), on a fake fleet.

The runtime runs for real (actors, supervisor, monitor, policy); its edges are
`inferactors.testing.FakeFleet`'s, with the probe wrapped by `BugSwitch` so a report raises
on demand (a worker bug injected through the edges), or a book method raises once (a bug in
the actor's loop; a managed server that is not running is never probed). Covered: a crash
while a start is under way aborts it once spawned and stops the new server; a crash during
an operator's stop keeps that stop's reason (no restart); a crash of an idle instance
restarts nothing; repeated crashes follow the backoff schedule and spend the budget; a bug
in the loop while the server runs is contained like a worker's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors.crash_support import BugSwitch, Recorder
from actors.managed_support import fake_fleet_config
from inferactors import (
    BackendError,
    Event,
    GaveUp,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceCrashed,
    InstanceHandle,
    InstanceState,
    InvalidState,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    RunEvidence,
    ServeArgs,
    StopReason,
    open_runtime,
)
from inferactors._actors.instance import status as instance_status
from inferactors._actors.instance import verdicts as instance_verdicts
from inferactors._actors.instance.state import State
from inferactors._edges.process import ChildProcess
from inferactors.testing import FakeFleet

PORT = 18530
POLICY = RestartPolicy(max_restarts=2, base_s=0.3, cap_s=1.0, jitter=0.0)
SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)
SPAWN_S = 1.0


@attrs.define
class Rig:
    runtime: InferRuntime
    fleet: FakeFleet
    bugs: BugSwitch
    recorder: Recorder
    slow_spawn: bool = False

    async def running(self, handle: InstanceHandle) -> None:
        with trio.fail_after(1000):
            await self.runtime.wait_state(handle, InstanceState.RUNNING)

    async def load_running(self) -> InstanceHandle:
        handle = await self.runtime.load(SPEC)
        await self.runtime.start(handle)
        await self.running(handle)
        return handle

    def events(self, kind: type[Event]) -> list[Event]:
        return [event for event in self.recorder.take() if isinstance(event, kind)]


@pytest.fixture
async def rig(tmp_path: Path, tiny_gguf: Path) -> AsyncIterator[Rig]:
    config = fake_fleet_config(tmp_path, tiny_gguf, POLICY)
    fleet, bugs = FakeFleet(), BugSwitch()
    edges = fleet.edges()
    spawn, holder = edges.open_process, list[Rig]()

    async def open_process(argv: Sequence[str], **options: Any) -> ChildProcess:
        if holder and holder[0].slow_spawn:
            await trio.sleep(SPAWN_S)
        return await spawn(argv, **options)

    edges = attrs.evolve(edges, open_prober=bugs.factory(edges.open_prober))
    edges = attrs.evolve(edges, open_process=open_process)
    async with open_runtime(config, node_id="crash", edges=edges) as runtime:
        holder.append(Rig(runtime, fleet, bugs, Recorder(await runtime.subscribe(1000))))
        yield holder[0]


def boom() -> Exception:
    return ValueError("boom")


def raise_once(monkeypatch: pytest.MonkeyPatch, name: str, error: Exception) -> None:
    """The next call of ``instance.status.<name>`` raises ``error``: a bug in the actor's
    loop (a managed server that is not running is never probed, so no edge is asked then)."""
    real = getattr(instance_status, name)
    armed = [error]

    def patched(state: State, *args: object) -> object:
        if armed:
            raise armed.pop()
        return real(state, *args)

    monkeypatch.setattr(instance_status, name, patched)


async def test_a_crash_while_starting_aborts_the_start_and_stops_the_new_server(
    rig: Rig, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = await rig.runtime.load(SPEC)
    rig.slow_spawn = True
    began = trio.current_time()
    outcome: list[BaseException | None] = []

    async def start() -> None:
        try:
            await rig.runtime.start(handle)
            outcome.append(None)
        except InvalidState as refused:
            outcome.append(refused)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start)
        await trio.sleep(SPAWN_S / 2)
        raise_once(monkeypatch, "idle_status", boom())
        said = "crashed in its loop, handling GetHealth (ValueError: boom)"
        with pytest.raises(BackendError, match=re.escape(said)):  # answered with the crash
            await rig.runtime.health(handle)  # its loop composes the status after it
    [refused] = outcome
    assert (
        str(refused)
        == f"the start of {handle.instance_id} was aborted by a crash (ValueError: boom)"
    )
    spawned = await rig.recorder.until(lambda e: isinstance(e, ProcessStarted))
    exited = await rig.recorder.until(lambda e: isinstance(e, ProcessExited))
    assert isinstance(exited, ProcessExited)
    assert isinstance(spawned, ProcessStarted)
    assert (exited.pid, exited.reason) == (spawned.pid, StopReason.ERROR)
    assert exited.at - began == pytest.approx(SPAWN_S)  # stopped as soon as it was spawned
    scheduled = await rig.recorder.until(lambda e: isinstance(e, RestartScheduled))
    assert isinstance(scheduled, RestartScheduled)
    assert scheduled.attempt == 1
    rig.slow_spawn = False
    await rig.running(handle)
    assert len(rig.fleet.children) == 2
    assert len(rig.fleet.live) == 1


async def test_a_crash_during_an_operator_stop_keeps_the_stop_and_restarts_nothing(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await rig.load_running()
    rig.fleet.last.ignore_term = True  # the stop takes its whole grace
    began = trio.current_time()
    evidence: list[RunEvidence] = []

    async def stop() -> None:
        evidence.append(await rig.runtime.stop(handle, 2.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop)
        await trio.sleep(0.5)
        rig.bugs.arm(PORT, boom)
        with pytest.raises(BackendError, match="ValueError: boom"):
            await rig.runtime.health(handle)
    [stopped] = evidence
    assert stopped.killed_after_grace
    assert trio.current_time() - began == pytest.approx(2.0)
    await trio.sleep(60)
    [exited] = rig.events(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.reason is StopReason.REQUESTED
    assert rig.events(RestartScheduled) == []
    assert len(rig.fleet.children) == 1
    status = rig.runtime.status(handle)
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "requested")


async def test_a_crash_of_an_idle_managed_instance_restarts_nothing(
    rig: Rig, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = await rig.runtime.load(SPEC)
    raise_once(monkeypatch, "idle_status", KeyError("slot"))
    with pytest.raises(BackendError, match="KeyError: 'slot'"):  # answered with the crash
        await rig.runtime.health(handle)  # its loop composes the status after it
    crash = await rig.recorder.crash_of(handle.instance_id)
    assert (crash.error_type, crash.where) == ("KeyError", "its loop, handling GetHealth")
    await trio.sleep(60)
    assert rig.events(RestartScheduled) == []
    assert rig.fleet.children == []
    assert (rig.runtime.status(handle)).state is InstanceState.LOADED
    await rig.runtime.start(handle)  # the reset instance works as before
    await rig.running(handle)


async def test_repeated_crashes_follow_the_backoff_and_spend_the_budget(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await rig.load_running()
    rig.bugs.arm(PORT, boom, times=100)
    gave_up = await rig.recorder.until(lambda e: isinstance(e, GaveUp))
    assert isinstance(gave_up, GaveUp)
    assert gave_up.attempts == POLICY.max_restarts
    delays = [e.delay_s for e in rig.events(RestartScheduled) if isinstance(e, RestartScheduled)]
    assert delays == pytest.approx([0.3, 0.6])
    exits = [e for e in rig.events(ProcessExited) if isinstance(e, ProcessExited)]
    assert [e.reason for e in exits] == [StopReason.ERROR] * 3
    assert len(rig.events(InstanceCrashed)) == 3
    await trio.sleep(60)
    assert len(rig.fleet.children) == 3
    assert rig.fleet.live == []
    status = rig.runtime.status(handle)
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "error")
    assert (status.supervision or "").startswith("gave up")


async def test_a_bug_in_the_actor_loop_crashes_its_instance_alone(
    rig: Rig, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = await rig.load_running()
    sibling = await rig.runtime.load(
        attrs.evolve(SPEC, role="embed", serve=ServeArgs(port=PORT + 1))
    )
    await rig.runtime.start(sibling)
    await rig.running(sibling)
    pid = rig.fleet.last.pid
    real = instance_verdicts.judge_report
    victim = rig.fleet.children[0]

    def judge_report(state: State, *args: Any, **kwargs: Any) -> object:
        if state.process is not None and state.process.pid == victim.pid:
            raise AttributeError("a bug in the loop")
        return real(state, *args, **kwargs)

    monkeypatch.setattr(instance_verdicts, "judge_report", judge_report)
    crash = await rig.recorder.crash_of(handle.instance_id)
    assert crash.where == "its loop, handling Probed"
    assert (crash.error_type, crash.message) == ("AttributeError", "a bug in the loop")
    assert not victim.alive
    await rig.running(handle)  # restarted; the new process is not the victim
    status = rig.runtime.status(sibling)
    assert (status.state, status.pid) == (InstanceState.RUNNING, pid)
