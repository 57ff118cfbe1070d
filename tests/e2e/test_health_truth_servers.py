"""Issue 9 item 5 against real processes: health speaks each server's truth.

Managed fake llama-servers (``inferactors.testing``) with the health faults of the class:
a ``/health`` that hangs, fails or resets while completions work; a 503 "no slot
available"; a slow first token; a router whose model's child failed; and a real socket
listening on ``::1`` only while we probe 127.0.0.1.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from e2e.field_support import SLACK_S, WAIT_S, Bench, Recorder, chat, policy, supervising
from inferactors import (
    AdmissionRefused,
    DeepHealthPassed,
    GaveUp,
    InferConfig,
    InferFlavor,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    StateChanged,
    StopReason,
    Supervision,
    open_runtime,
)
from inferactors._actors.instance.verdicts import MISBOUND_SETTLE_S, UNHEALTHY_KILL_AFTER_S
from inferactors._stop_reasons import Diagnosis, FaultKind
from inferactors.testing._fake_faults import FakeServerFaults

FAULT_AFTER_S = 3.0
"""The health fault begins this long after the fake listens: time to become Running."""


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("500", "health endpoint failing (/health returned HTTP 500); completions work"),
        ("hang", "health endpoint not answering (timeout); completions work"),
        ("reset", "health endpoint not answering (GET /health: "),
    ],
)
async def test_a_failing_health_with_working_completions_is_degraded_and_never_killed(
    bench: Bench, free_port: int, fault: str, said: str
) -> None:
    faults = FakeServerFaults(health_fault=fault, health_fault_after_s=FAULT_AFTER_S)
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)
        degraded = await rec.state(InstanceState.DEGRADED)
        assert (degraded.detail or "").startswith(said.split("(")[0])
        confirmed = await _detail_with(rec, "completions work")
        assert (confirmed.detail or "").startswith(said)
        await trio.sleep(3 * UNHEALTHY_KILL_AFTER_S)  # well past the health-kill window
        assert rec.of(ProcessExited) == []
        status = runtime.status(handle)
        assert (status.state, status.pid) == (InstanceState.DEGRADED, started.pid)
        assert "completions work" in (status.detail or "")
        assert [e.ttft_s >= 0 for e in rec.of(DeepHealthPassed)][:2] == [True, True]


async def _detail_with(rec: Recorder, words: str) -> StateChanged:
    """The next state change whose detail contains ``words``."""
    with trio.fail_after(WAIT_S):
        while True:
            change = await rec.next(StateChanged)
            if words in (change.detail or ""):
                return change


async def test_a_503_no_slot_available_is_busy_running_never_loading(
    bench: Bench, free_port: int
) -> None:
    faults = FakeServerFaults(health_fault="busy")
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        running = await rec.state(InstanceState.RUNNING)
        assert running.detail == "busy: no slot available"
        for _ in range(4):
            status = runtime.status(handle)
            assert (status.state, status.last_probe) == (InstanceState.RUNNING, "busy")
            await trio.sleep(0.3)
        details = [change.detail or "" for change in rec.of(StateChanged)]
        assert not any("loading" in detail for detail in details)


async def test_a_slow_first_token_is_degraded_slow_and_its_ttft_is_published(
    bench: Bench, free_port: int
) -> None:
    faults = FakeServerFaults(completion_delay_s=0.6)
    supervision = Supervision(slow_after_s=0.3)
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), supervision)
        await runtime.start(handle)
        passed = await rec.next(DeepHealthPassed)
        assert 0.6 <= passed.ttft_s < 0.6 + SLACK_S
        slow = await rec.state(InstanceState.DEGRADED)
        while not (slow.detail or "").startswith("slow"):
            slow = await rec.state(InstanceState.DEGRADED)
        assert slow.detail == f"slow: first token in {passed.ttft_s:.1f} s (threshold 0.3 s)"
        status = runtime.status(handle)
        assert (status.state, status.ttft_s) == (InstanceState.DEGRADED, passed.ttft_s)


async def test_a_quick_first_token_is_running_with_its_ttft(bench: Bench, free_port: int) -> None:
    async with supervising(bench.config(bench.program(FakeServerFaults()))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        passed = await rec.next(DeepHealthPassed)
        await rec.state(InstanceState.RUNNING)
        status = runtime.status(handle)
        assert status.ttft_s == passed.ttft_s
        assert 0 < passed.ttft_s < 10.0


async def test_the_first_token_uses_the_instances_deep_health_timeout(
    bench: Bench, free_port: int
) -> None:
    faults = FakeServerFaults(completion_delay_s=5.0)  # the runtime's deep timeout is 10 s
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(deep_timeout_s=0.5))
        await runtime.start(handle)
        failed = await _detail_with(rec, "the first token failed")
        assert "0.5 s" in (failed.detail or "")
        assert rec.of(DeepHealthPassed) == []


async def test_a_router_whose_model_failed_is_not_running(bench: Bench, free_port: int) -> None:
    faults = FakeServerFaults(router_status="failed")
    config = bench.config(bench.program(faults), readiness_timeout_s=2.0)
    async with supervising(config) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        failed = await _detail_with(rec, "router: model")
        assert failed.new is InstanceState.DEGRADED
        assert "failed to load (its child exited with code 1)" in (failed.detail or "")
        await rec.next(ProcessExited)  # never ready: the readiness deadline ends it
        states = [change.new for change in rec.of(StateChanged)]
        assert InstanceState.RUNNING not in states


@contextmanager
def listening_on_ipv6_loopback(port: int) -> Iterator[None]:
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(("::1", port))
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    with sock:
        sock.listen()
        yield


async def test_adopting_a_server_on_ipv6_loopback_only_is_refused_as_that_error_at_once(
    free_port: int,
) -> None:
    said = f'listening on [::1]:{free_port}, not 127.0.0.1:{free_port}: set serve.host = "::1"'
    with listening_on_ipv6_loopback(free_port):
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
            asked = trio.current_time()
            with pytest.raises(AdmissionRefused) as refused:
                await runtime.load(chat(free_port))
            assert trio.current_time() - asked < 1.0
            assert str(refused.value).endswith(said)


async def test_a_managed_server_on_ipv6_loopback_only_is_a_config_error_long_before_its_deadline(
    bench: Bench, free_port: int
) -> None:
    """Said at once in status, then stopped as a configuration error: no restart onto the
    same mistake, no wait for the readiness deadline, the reason kept everywhere."""
    said = f'listening on [::1]:{free_port}, not 127.0.0.1:{free_port}: set serve.host = "::1"'
    with listening_on_ipv6_loopback(free_port):
        pass  # skips the test when this machine has no IPv6 loopback
    fake = bench.program(FakeServerFaults())
    wrapper = bench.root / "on-ipv6"  # the launch says 127.0.0.1; the server binds ::1
    wrapper.write_text(f'#!/bin/sh\nexec {fake} "$@" --host ::1\n')
    wrapper.chmod(0o755)
    config = bench.config(wrapper, restart=policy(3), readiness_timeout_s=20.0)
    async with supervising(config) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        change = await _detail_with(rec, "set serve.host")
        assert (change.new, change.detail) == (InstanceState.DEGRADED, said)
        assert change.at - started.at < 5.0  # the python fake's start-up, plus a scan
        exited = await rec.next(ProcessExited)
        gave_up = await rec.next(GaveUp)
        assert exited.at - change.at < MISBOUND_SETTLE_S + SLACK_S
        assert exited.reason is StopReason.STARTUP_FAILURE
        assert exited.diagnosis == Diagnosis(
            FaultKind.WRONG_ADDRESS_FAMILY, said, exited.last_lines
        )
        assert (gave_up.attempts, gave_up.why) == (0, f"config-error: {said}")
        await trio.sleep(0.5)
        assert len(rec.of(ProcessStarted)) == 1  # never restarted onto the same mistake
        status = runtime.status(handle)
        assert (status.state, status.detail) == (InstanceState.EXITED, f"failed to start: {said}")
        assert (status.stop_reason, status.diagnosis) == ("config-error", said)
        assert status.supervision == f"gave up: config-error: {said}"
