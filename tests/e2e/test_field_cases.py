"""Field cases against real processes: the readiness deadline (issue 3).

One test per field case of /work/shared/reference/field-cases.md, named after its id. A
managed runtime supervises the fake server program of ``inferactors.testing`` with the
case's faults injected, run as ``unprivileged.run_as`` from a world-readable place; every
wait has a generous deadline and no test leaves a process of a server's group behind.

The harness is in ``field_support.py``.
"""

from __future__ import annotations

import pytest
import trio

from e2e.field_support import (
    WAIT_S,
    Bench,
    assert_group_gone,
    chat,
    deadline_kept,
    killed_at_once,
    policy,
    reasons,
    status_when,
    supervising,
    wait_members,
    within,
)
from inferactors import (
    GaveUp,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    RestartScheduled,
    StateChanged,
    StopReason,
    Supervision,
)
from inferactors.testing._fake_faults import FakeServerFaults

# FC-01, FC-02, FC-06: the readiness deadline.


@pytest.mark.exclusive  # a 0.8 s readiness deadline against a 1.5 s load, in real time
async def test_fc01_slow_load_fails_then_a_longer_deadline_starts_clean(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(load_s=1.5))
    async with supervising(bench.config(program, restart=policy(1))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=0.8))
        asked = trio.current_time()
        await runtime.start(handle)
        first = await rec.next(ProcessStarted)
        killed = await rec.next(ProcessExited)
        assert (killed.pid, killed.reason) == (first.pid, StopReason.READINESS_TIMEOUT)
        assert killed_at_once(killed)
        assert deadline_kept(killed, first, asked, 0.8)
        assert (await rec.next(RestartScheduled)).attempt == 1
        assert (await rec.next(ProcessExited)).reason is StopReason.READINESS_TIMEOUT
        assert (await rec.next(GaveUp)).attempts == 1
        failed = runtime.status(handle)
        assert (failed.state, failed.stop_reason) == (InstanceState.EXITED, "readiness timeout")
        assert failed.detail == "killed: not ready before the readiness deadline"
        assert failed.supervision is not None
        assert failed.supervision.startswith("gave up")
        assert not [c for c in rec.of(StateChanged) if c.new is InstanceState.RUNNING]

        await runtime.unload(handle)  # no stuck state: reload with a deadline that fits
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=WAIT_S))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        loading = await status_when(runtime, handle, last_probe="loading")  # progress shows
        assert (loading.state, loading.detail) == (InstanceState.DEGRADED, "loading model")
        assert loading.uptime_s is not None
        assert loading.uptime_s > 0
        running = await rec.state(InstanceState.RUNNING)
        assert running.at - started.at >= 1.5  # it waited out the whole load
        assert (runtime.status(handle)).state is InstanceState.RUNNING


async def test_fc02_readiness_kills_count_toward_the_limit_and_end_in_give_up(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(load_forever=True))
    config = bench.config(program, restart=policy(2, base_s=0.2, cap_s=0.4))
    async with supervising(config) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=0.6))
        asked = trio.current_time()
        await runtime.start(handle)
        gave_up = await rec.next(GaveUp)
        assert gave_up.attempts == 2
        starts, exits = rec.of(ProcessStarted), rec.of(ProcessExited)
        assert len(starts) == len(set(rec.pids())) == 3
        assert reasons(exits) == [StopReason.READINESS_TIMEOUT] * 3
        scheduled = rec.of(RestartScheduled)
        assert [e.attempt for e in scheduled] == [1, 2]
        delays = [e.delay_s for e in scheduled]
        assert delays == pytest.approx([0.2, 0.4])
        spawned_after = [asked, *(e.at + e.delay_s for e in scheduled)]
        for start, exit, after in zip(starts, exits, spawned_after, strict=True):
            assert exit.pid == start.pid
            assert deadline_kept(exit, start, after, 0.6)
        for exit, later, delay in zip(exits, starts[1:], delays, strict=False):
            assert within(later.at - exit.at, delay)
        await trio.sleep(0.5)  # nothing more is spawned after the give-up
        assert len(rec.of(ProcessStarted)) == 3
        status = runtime.status(handle)
        assert (status.state, status.stop_reason, status.restarts) == (
            InstanceState.EXITED,
            "readiness timeout",
            2,
        )


async def test_fc06_health_503_forever_is_killed_and_counted(bench: Bench, free_port: int) -> None:
    program = bench.program(FakeServerFaults(load_forever=True, fork_child=True))
    async with supervising(bench.config(program, restart=policy(3))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=1.0))
        await runtime.start(handle)
        for attempt in (1, 2):
            started = await rec.next(ProcessStarted)
            await wait_members(started.pid, 2)  # the server and the child it forked
            exited = await rec.next(ProcessExited)
            assert exited.reason is StopReason.READINESS_TIMEOUT
            assert killed_at_once(exited)
            await assert_group_gone(started.pid)  # the whole group, the child too
            assert (await rec.next(RestartScheduled)).attempt == attempt
            status = runtime.status(handle)
            assert status.restarts == attempt
            assert status.stop_reason == "readiness timeout"
