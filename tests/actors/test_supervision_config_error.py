"""The supervisor applies the config-error rule (issue 9 item 2), under trio's
MockClock(autojump_threshold=0) on a fake fleet: the same diagnosed start-up failure twice
in a row gives up at once, with no backoff and no third spawn; an undiagnosed start-up
crash and an out-of-memory after Running follow the restart policy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from actors.managed_support import ClockEvents, fake_fleet_config
from inferactors import (
    GaveUp,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    ServeArgs,
    StopReason,
    open_runtime,
)
from inferactors._actors.runtime import InstanceHandle
from inferactors._events import Event
from inferactors._stop_reasons import FaultKind
from inferactors.testing import FakeFleet

PORT = 18510
POLICY = RestartPolicy(max_restarts=3, base_s=0.3, cap_s=1.0, jitter=0.0)
SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)
FLAG = b"error: invalid argument: --no-such-flag\n"
OOM = b"0.00.277.205 E ggml_aligned_malloc: insufficient memory (attempted to allocate 488 MB)\n"


@pytest.fixture
def config(tmp_path: Path, tiny_gguf: Path) -> InferConfig:
    return fake_fleet_config(tmp_path, tiny_gguf, POLICY)


@attrs.define
class Run(ClockEvents):
    async def settle(self, seconds: float = 100.0) -> None:
        """Let ``seconds`` of virtual time pass, keeping every event."""
        with trio.move_on_after(seconds):
            async for event in self.events:
                self.seen.append(event)

    def count(self, kind: type[Event]) -> int:
        return sum(isinstance(event, kind) for event in self.seen)


@pytest.fixture
async def run(config: InferConfig) -> AsyncIterator[Run]:
    fleet = FakeFleet(load_s=None)  # never ready: every exit is during start-up
    async with open_runtime(config, node_id="clock", edges=fleet.edges()) as runtime:
        events = await runtime.subscribe(buffer=1000)
        yield Run(runtime, fleet, events, trio.current_time())


async def started(run: Run) -> InstanceHandle:
    handle = await run.runtime.load(SPEC)
    await run.runtime.start(handle)
    await run.next(ProcessStarted)
    return handle


async def test_the_same_start_up_failure_twice_gives_up_at_once(
    run: Run, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await started(run)
    run.fleet.last.crash(stderr=FLAG)
    first = await run.next(ProcessExited)
    assert isinstance(first, ProcessExited)
    assert first.reason is StopReason.STARTUP_FAILURE
    assert first.diagnosis is not None
    assert first.diagnosis.kind is FaultKind.INVALID_FLAG
    assert first.last_lines == ("error: invalid argument: --no-such-flag",)
    scheduled = await run.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert (scheduled.attempt, scheduled.delay_s, run.at()) == (1, 0.3, 0.0)

    await run.next(ProcessStarted)
    assert run.at() == 0.3
    run.fleet.last.crash(stderr=FLAG)
    gave = await run.next(GaveUp)
    assert isinstance(gave, GaveUp)
    assert run.at() == 0.3  # at once: no backoff before giving up
    assert gave.why == "config-error: invalid flag: error: invalid argument: --no-such-flag"
    await run.settle()
    assert run.count(ProcessStarted) == 2
    assert len(run.fleet.children) == 2
    status = run.runtime.status(handle)
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "config-error")
    assert status.supervision == f"gave up: {gave.why}"
    assert status.diagnosis == "invalid flag: error: invalid argument: --no-such-flag"


async def test_two_different_start_up_failures_are_restarted(
    run: Run, autojump_clock: trio.testing.MockClock
) -> None:
    await started(run)
    run.fleet.last.crash(stderr=FLAG)
    await run.next(ProcessStarted)
    run.fleet.last.crash(stderr=OOM)
    exited = await run.next(ProcessExited)
    assert isinstance(exited, ProcessExited)
    assert exited.diagnosis is not None
    assert exited.diagnosis.kind is FaultKind.OUT_OF_MEMORY
    scheduled = await run.next(RestartScheduled)
    assert isinstance(scheduled, RestartScheduled)
    assert (scheduled.attempt, scheduled.delay_s) == (2, 0.6)
    assert run.count(GaveUp) == 0


async def test_undiagnosed_start_up_crashes_in_other_words_follow_the_restart_policy(
    run: Run, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await started(run)
    for attempt in range(POLICY.max_restarts + 1):
        run.fleet.last.crash(stderr=f"something happened ({attempt})\n".encode())
        await run.next(ProcessExited)
        if run.count(ProcessStarted) <= POLICY.max_restarts:
            await run.next(ProcessStarted)
    gave = await run.next(GaveUp)
    assert isinstance(gave, GaveUp)
    exits = [e for e in run.seen if isinstance(e, ProcessExited)]
    assert {(e.reason, e.diagnosis) for e in exits} == {(StopReason.CRASH, None)}
    assert gave.why == "restart budget spent (3 of 3); last: exit status 1: something happened (3)"
    assert run.runtime.status(handle).stop_reason == "crash"


async def test_the_same_undiagnosed_start_up_crash_twice_gives_up_at_once_in_its_words(
    run: Run, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await started(run)
    run.fleet.last.crash(exit_code=3, stderr=b"starting\nerror: something is wrong\n")
    await run.next(ProcessStarted)
    run.fleet.last.crash(exit_code=3, stderr=b"starting\nerror: something is wrong\n")
    gave = await run.next(GaveUp)
    assert isinstance(gave, GaveUp)
    assert gave.why == (
        "config-error: the same failure twice at start: exit status 3: error: something is wrong"
    )
    await run.settle()
    assert run.count(ProcessStarted) == 2, "no third spawn"
    assert "exit status 3" in (run.runtime.status(handle).supervision or "")


async def test_an_out_of_memory_after_running_is_a_crash_and_restarted(
    config: InferConfig, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet()  # ready at once
    async with open_runtime(config, node_id="clock", edges=fleet.edges()) as runtime:
        run = Run(runtime, fleet, await runtime.subscribe(buffer=1000), trio.current_time())
        handle = await runtime.load(SPEC)
        await runtime.start(handle)
        for attempt in (1, 2):
            await runtime.wait_state(handle, InstanceState.RUNNING)
            fleet.last.crash(stderr=OOM)
            exited = await run.next(ProcessExited)
            assert isinstance(exited, ProcessExited)
            assert exited.reason is StopReason.CRASH
            assert exited.diagnosis is not None
            assert exited.diagnosis.kind is FaultKind.OUT_OF_MEMORY
            scheduled = await run.next(RestartScheduled)
            assert isinstance(scheduled, RestartScheduled)
            assert scheduled.attempt == attempt
        assert run.count(GaveUp) == 0
