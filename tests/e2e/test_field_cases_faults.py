"""Field cases against real processes: hung completions, crashes, stops and their reasons (issue 3).

FC-04, FC-05, FC-08, FC-10, FC-11, FC-12 and FC-22 of /work/shared/reference/field-cases.md, each
on a managed fake server with the case's faults (harness: ``test_field_cases``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import attrs
import psutil
import pytest
import trio

from e2e.field_support import (
    SLACK_S,
    Bench,
    another_port,
    assert_group_gone,
    chat,
    eventually,
    policy,
    reasons,
    supervising,
    wait_members,
    within,
)
from inferactors import (
    BackendError,
    DeepHealthFailed,
    GaveUp,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InstanceStatus,
    ProcessExited,
    ProcessStarted,
    RestartScheduled,
    StateChanged,
    StopReason,
    Supervision,
    Watchdog,
)
from inferactors.testing._fake_faults import FakeServerFaults
from inferactors.testing._fake_server import read_request_log
from support import Unprivileged

STOP_BOUND_S = 0.5
"""A stop returns within its grace plus this (issue 3, item 6; FC-11)."""


@pytest.fixture
def bench(unprivileged: Unprivileged, server_dir: Path, registry_path: Path) -> Bench:
    return Bench(unprivileged, server_dir, registry_path)


@attrs.define
class Outcome:
    """What a background call ended with: its error, and when (trio time)."""

    error: BaseException | None = None
    at: float | None = None


async def deep_health_in_background(
    nursery: trio.Nursery, runtime: InferRuntime, handle: InstanceHandle
) -> Outcome:
    """Start a deep-health call that the fake will hang; its outcome fills in when it ends."""
    outcome = Outcome()

    async def call() -> None:
        try:
            await runtime.deep_health(handle)
        except BackendError as error:
            outcome.error = error
        outcome.at = trio.current_time()

    nursery.start_soon(call)
    return outcome


async def wait_posts(log: Path, count: int) -> None:
    """Wait until the fake's request log holds ``count`` POST requests."""
    assert await eventually(lambda: posts(log) >= count), f"{count} POST requests"


def posts(log: Path) -> int:
    """How many POST requests the fake's request log holds."""
    return sum(request.method == "POST" for request in read_request_log(log))


# FC-04: /health fine while every completion hangs.


async def test_fc04_hung_completions_fail_the_watchdog_and_the_server_is_restarted(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(fail_completions_after=1))  # 1: the first token
    watchdog = Watchdog(interval_s=0.3, timeout_s=0.5, failures=2)
    async with supervising(bench.config(program, restart=policy(1))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(watchdog=watchdog))
        await runtime.start(handle)
        first = await rec.next(ProcessStarted)
        running = await rec.state(InstanceState.RUNNING)
        failures = [await rec.next(DeepHealthFailed) for _ in range(2)]
        assert [f.consecutive for f in failures] == [1, 2]
        assert all("deep health" in f.why for f in failures)
        killed = await rec.next(ProcessExited)
        before_kill = rec.seen[rec.seen.index(failures[1]) : rec.seen.index(killed)]
        unhealthy = [e for e in before_kill if isinstance(e, StateChanged)]
        assert [(e.new, (e.detail or "")[:26]) for e in unhealthy] == [
            (InstanceState.DEGRADED, "deep health failed 2 times")
        ]  # reported unhealthy, then killed
        assert (killed.pid, killed.reason) == (first.pid, StopReason.HEALTH_KILL)
        assert killed.at - running.at >= 2 * (0.3 + 0.5)  # the watchdog starts when ready
        await assert_group_gone(first.pid)
        assert (await rec.next(RestartScheduled)).attempt == 1
        second = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)  # the restarted server answers again
        status = runtime.status(handle)
        assert (status.state, status.pid, status.restarts) == (
            InstanceState.RUNNING,
            second.pid,
            1,
        )


# FC-05: the server ignores SIGTERM with a request hanging.


async def test_fc05_a_hung_server_that_ignores_sigterm_is_killed_after_the_grace(
    bench: Bench, free_port: int
) -> None:
    faults = FakeServerFaults(ignore_sigterm=True, fail_completions_after=1)
    program = bench.program(faults, request_log=Path("requests.log"))
    config = bench.config(program, restart=policy(2))
    async with supervising(config) as (runtime, rec), trio.open_nursery() as nursery:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)
        hung = await deep_health_in_background(nursery, runtime, handle)
        log = bench.instance_dir(handle) / "requests.log"
        await wait_posts(log, 2)  # the first token, then our completion, which hangs
        before = trio.current_time()
        evidence = await runtime.stop(handle, 0.5)
        returned = trio.current_time()
        assert 0.5 <= returned - before < 0.5 + STOP_BOUND_S
        assert (evidence.signal, evidence.killed_after_grace) == (signal.SIGKILL, True)
        await assert_group_gone(started.pid, within_s=0.1)  # reaped when stop returned
        assert await eventually(lambda: hung.at is not None, SLACK_S)  # ended with the server
        assert hung.at is not None
        assert isinstance(hung.error, BackendError)
        assert hung.at - returned < SLACK_S  # the connection died: no deep-health timeout
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "requested")
        assert not rec.of(RestartScheduled)  # an operator's stop is not a fault


# FC-08: killed (OOM) on its first request.


async def test_fc08_a_server_killed_on_its_first_request_is_counted_and_given_up(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(
        FakeServerFaults(crash_on_completion="SIGKILL"), request_log=Path("requests.log")
    )
    config = bench.config(program, restart=policy(2, base_s=0.2, cap_s=0.4))
    async with supervising(config) as (runtime, rec), trio.open_nursery() as nursery:
        handle = await runtime.load(chat(free_port))
        log = bench.instance_dir(handle) / "requests.log"
        fatal: list[float] = []  # when each fatal completion was seen in the log (trio time)

        async def watch_log() -> None:
            for count in range(1, 4):
                await wait_posts(log, count)
                fatal.append(trio.current_time())

        nursery.start_soon(watch_log)
        await runtime.start(handle)
        gave_up = await rec.next(GaveUp)
        assert gave_up.attempts == 2
        exits = rec.of(ProcessExited)
        assert reasons(exits) == [StopReason.CRASH] * 3
        assert all(exit.signal == signal.SIGKILL for exit in exits)
        assert await eventually(lambda: len(fatal) == 3)
        detection = [exit.at - seen for exit, seen in zip(exits, fatal, strict=True)]
        assert max(detection) < 1.0, detection  # a crash is seen in well under 1 s
        assert [e.attempt for e in rec.of(RestartScheduled)] == [1, 2]
        assert not [c for c in rec.of(StateChanged) if c.new is InstanceState.RUNNING]
        status = runtime.status(handle)
        assert (status.state, status.stop_reason, status.restarts) == (
            InstanceState.EXITED,
            "crash",
            2,
        )
        assert status.supervision is not None
        assert status.supervision.startswith("gave up")


# FC-10: a crash mid-stream is restarted with no client asking.


async def test_fc10_a_crash_mid_stream_is_restarted_after_the_backoff_unasked(
    bench: Bench, free_port: int
) -> None:
    faults = FakeServerFaults(fail_completions_after=1)
    program = bench.program(faults, request_log=Path("requests.log"))
    async with supervising(bench.config(program, restart=policy(1))) as (runtime, rec):
        async with trio.open_nursery() as nursery:
            handle = await runtime.load(chat(free_port))
            await runtime.start(handle)
            first = await rec.next(ProcessStarted)
            await rec.state(InstanceState.RUNNING)
            stream = await deep_health_in_background(nursery, runtime, handle)
            await wait_posts(bench.instance_dir(handle) / "requests.log", 2)  # it hangs
            os.kill(first.pid, signal.SIGABRT)  # mid-stream
        assert isinstance(stream.error, BackendError)
        # From here on only events are read: no request of ours may trigger the restart.
        crashed = await rec.next(ProcessExited)
        assert (crashed.pid, crashed.reason, crashed.signal) == (
            first.pid,
            StopReason.CRASH,
            signal.SIGABRT,
        )
        scheduled = await rec.next(RestartScheduled)
        assert scheduled.attempt == 1
        assert scheduled.delay_s == pytest.approx(0.2)
        second = await rec.next(ProcessStarted)
        assert within(second.at - crashed.at, 0.2)
        await rec.state(InstanceState.RUNNING)
        await assert_group_gone(first.pid)
        status = runtime.status(handle)
        assert (status.state, status.pid, status.restarts) == (
            InstanceState.RUNNING,
            second.pid,
            1,
        )


# FC-11: SIGTERM ignored; the stop must still end and the next start work.


@pytest.mark.exclusive  # the stop returns within 0.5 s of its grace, in real time
async def test_fc11_sigterm_ignored_stop_returns_after_the_grace_and_start_works(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(ignore_sigterm=True))
    async with supervising(bench.config(program, restart=policy(2))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        first = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)
        before = trio.current_time()
        evidence = await runtime.stop(handle, 1.0)
        elapsed = trio.current_time() - before
        assert 1.0 <= elapsed < 1.0 + STOP_BOUND_S
        assert (evidence.pid, evidence.signal, evidence.killed_after_grace) == (
            first.pid,
            signal.SIGKILL,
            True,
        )
        await assert_group_gone(first.pid, within_s=0.1)
        stopped = runtime.status(handle)
        assert (stopped.state, stopped.stop_reason) == (InstanceState.EXITED, "requested")
        assert (await rec.next(ProcessExited)).reason is StopReason.REQUESTED

        await runtime.start(handle)  # not stuck: the next start works
        second = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)
        assert second.pid != first.pid
        assert not rec.of(RestartScheduled)
        assert (runtime.status(handle)).restarts == 0
        await runtime.stop(handle, 0.1)  # not the runtime's longer grace on the way out


# FC-12: a wrapper script that forks ("$@" &) instead of exec-ing.


async def test_fc12_a_forking_wrapper_is_stopped_with_its_whole_tree(
    bench: Bench, free_port: int
) -> None:
    fake = bench.program(FakeServerFaults(ignore_sigterm=True, fork_child=True))
    wrapper = bench.root / "forking-wrapper"
    wrapper.write_text(f'#!/bin/sh\n"{fake}" "$@" &\nwait\n')  # llama-swap #804
    wrapper.chmod(0o755)
    async with supervising(bench.config(wrapper)) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        leader = (await rec.next(ProcessStarted)).pid
        await rec.state(InstanceState.RUNNING)
        tree = await wait_members(leader, 3)  # sh, the fake, the child the fake forked
        before = trio.current_time()
        evidence = await runtime.stop(handle, 2.0)
        # sh dies of SIGTERM at once, but the grace is the group's (issue 8 item 8): the fake,
        # ignoring SIGTERM, gets the whole 2 s and only then the SIGKILL
        assert 2.0 <= trio.current_time() - before < 4.0
        assert (evidence.signal, evidence.killed_after_grace) == (signal.SIGTERM, True)
        for pid in tree:
            assert not _alive(pid), f"{pid} of the wrapper's tree survived the stop"
        await _group_reaped(leader)  # ESRCH once init has reaped the orphaned zombies
        assert evidence.output_eof  # no survivor kept the pipes open
        assert b"inferactors fake server (llamacpp) listening" in evidence.stdout
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "requested")


async def _group_reaped(pgid: int) -> None:
    assert await eventually(lambda: not _group_exists(pgid), 10.0), f"group {pgid} remains"


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# FC-22: why a server stopped, apart from how it exited.


@attrs.frozen
class StopCase:
    """A server that ends for one reason: its faults, its supervision, whether we stop it."""

    faults: FakeServerFaults
    supervision: Supervision
    requested: bool = False


@attrs.frozen
class Ended:
    """How one server ended: its `ProcessExited` event and the status afterwards."""

    exited: ProcessExited
    status: InstanceStatus


STOP_CASES = {
    StopReason.REQUESTED: StopCase(FakeServerFaults(), Supervision(), requested=True),
    StopReason.CRASH: StopCase(FakeServerFaults(crash_after_s=0.8, exit_code=3), Supervision()),
    StopReason.READINESS_TIMEOUT: StopCase(
        FakeServerFaults(load_forever=True, ignore_sigterm=True),
        Supervision(readiness_timeout_s=0.8),
    ),
    StopReason.HEALTH_KILL: StopCase(
        FakeServerFaults(fail_completions_after=1),
        Supervision(watchdog=Watchdog(interval_s=0.2, timeout_s=0.4, failures=1)),
    ),
}


async def _end_one(bench: Bench, reason: StopReason, found: dict[StopReason, Ended]) -> None:
    case, name = STOP_CASES[reason], reason.name.lower()
    config = bench.config(bench.program(case.faults, name=f"{name}.sh"), data_root=name)
    async with supervising(config) as (runtime, rec):
        spec = chat(another_port(), role=name.replace("_", ""))
        handle = await runtime.load(spec, case.supervision)
        await runtime.start(handle)
        if case.requested:
            await rec.state(InstanceState.RUNNING)
            evidence = await runtime.stop(handle, 2.0)
            assert (evidence.exit_code, evidence.signal) == (0, None)
        exited = await rec.next(ProcessExited)
        found[reason] = Ended(exited, runtime.status(handle))


async def test_fc22_the_stop_reason_is_recorded_apart_from_the_exit_status(
    bench: Bench,
) -> None:
    found: dict[StopReason, Ended] = {}
    async with trio.open_nursery() as nursery:  # four runtimes at once
        for reason in STOP_CASES:
            nursery.start_soon(_end_one, bench, reason, found)
    # Exit status 0 for two reasons: only the reason tells a stop from a health kill.
    expected = {
        StopReason.REQUESTED: (0, None, "stopped on request"),
        StopReason.CRASH: (3, None, "server process exited"),
        StopReason.READINESS_TIMEOUT: (None, 9, "killed: not ready before the readiness deadline"),
        StopReason.HEALTH_KILL: (0, None, "killed: deep health failed"),
    }
    for reason, (code, signum, detail) in expected.items():
        exited, status = found[reason].exited, found[reason].status
        assert (exited.reason, exited.exit_code, exited.signal) == (reason, code, signum)
        assert status.state is InstanceState.EXITED
        assert (status.stop_reason, status.exit_code, status.detail) == (reason.value, code, detail)
