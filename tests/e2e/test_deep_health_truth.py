"""Issue 9 item 5, a caller's deep health: the completion is the truth.

`InferRuntime.deep_health` on managed fake llama-servers (``inferactors.testing``) whose
``/health`` hangs, fails or resets while completions work: the token comes back quickly
(a hung ``/health`` does not eat the deadline) and is published; a server that really is
loading still gets the honest "loading" answer.
"""

from __future__ import annotations

import pytest
import trio

from e2e.field_support import SLACK_S, Bench, Recorder, chat, supervising
from inferactors import (
    BackendError,
    DeepHealthPassed,
    InstanceState,
    ProcessStarted,
    Supervision,
)
from inferactors.testing._fake_faults import FakeServerFaults

FAULT_AFTER_S = 3.0
"""The health fault begins this long after the fake listens: time to become Running, with
room for a shared machine (as in ``test_health_truth_servers.py``)."""

DEEP_S = 8.0
"""The instance's deep-health timeout: a check that waited it out would show."""


@pytest.mark.parametrize("fault", ["hang", "500", "reset"])
async def test_deep_health_sends_its_completion_when_health_fails_and_publishes_it(
    bench: Bench, free_port: int, fault: str
) -> None:
    faults = FakeServerFaults(health_fault=fault, health_fault_after_s=FAULT_AFTER_S)
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(deep_timeout_s=DEEP_S))
        await runtime.start(handle)
        running = await rec.state(InstanceState.RUNNING)
        await rec.next(DeepHealthPassed)  # readiness's first token
        # the fake listened before it was Running: its fault is on from here
        await trio.sleep_until(running.at + FAULT_AFTER_S + 0.5)
        asked = trio.current_time()
        result = await runtime.deep_health(handle)
        took = trio.current_time() - asked
        assert result.latency_s > 0
        assert took < DEEP_S / 4 + SLACK_S  # at most the probe's share, then the token
        await _published(rec, result.latency_s)
        status = runtime.status(handle)
        assert status.ttft_s == result.latency_s


async def _published(rec: Recorder, ttft_s: float) -> None:
    """Wait for the `DeepHealthPassed` of ``ttft_s`` (events travel through the supervisor)."""
    while (await rec.next(DeepHealthPassed, within_s=SLACK_S)).ttft_s != ttft_s:
        pass


async def test_deep_health_of_a_quiet_server_is_published_too(bench: Bench, free_port: int) -> None:
    async with supervising(bench.config(bench.program(FakeServerFaults()))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        first = await rec.next(DeepHealthPassed)
        result = await runtime.deep_health(handle)
        assert result.latency_s != first.ttft_s
        await _published(rec, result.latency_s)
        assert (runtime.status(handle)).ttft_s == result.latency_s


async def test_deep_health_of_a_loading_server_says_loading(bench: Bench, free_port: int) -> None:
    faults = FakeServerFaults(load_forever=True)
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await rec.next(ProcessStarted)
        with trio.fail_after(20):
            while (runtime.status(handle)).last_probe != "loading":  # noqa: ASYNC110
                await trio.sleep(0.05)
        with pytest.raises(BackendError) as refused:
            await runtime.deep_health(handle)
        assert str(refused.value) == "deep health: the server is not up (loading)"
        assert rec.of(DeepHealthPassed) == []
