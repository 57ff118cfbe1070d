"""Issue 9 item 5 at the actor level, under trio's MockClock(autojump_threshold=0).

A `FakeFleet` runs the servers; its prober is wrapped so ``/health`` turns bad at a chosen
virtual time while completions go on (or fail, or take long), so every delay is exact: the
confirming completion and its re-sends every `CONFIRM_EVERY_S`, the health-kill window, the
time to first token and the slow threshold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import attrs
import pytest
import trio
import trio.testing

from inferactors import (
    DeepHealthPassed,
    Event,
    GaveUp,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    ManagedConfig,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    ServeArgs,
    StateChanged,
    StopReason,
    Supervision,
    Watchdog,
    open_runtime,
)
from inferactors._actors.instance.probing import CONFIRM_EVERY_S
from inferactors._actors.instance.verdicts import UNHEALTHY_KILL_AFTER_S
from inferactors._edges.probe import Prober, ProberFactory
from inferactors._errors import BackendError, NoVerdict, RequestRefused
from inferactors._flavor import InferFlavor as Flavor
from inferactors._models.registry import ModelRegistry
from inferactors._policy.probe_report import Busy, CompletionResult, Health, Loading, ServerReport
from inferactors._policy.probe_report import Unhealthy as UnhealthyHealth
from inferactors.testing import FakeFleet

E = TypeVar("E")

PORT = 18590
SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)
BROKEN = UnhealthyHealth("/health returned HTTP 500")


@attrs.define
class Faults:
    """What the wrapped prober does: ``health`` replaces every report's health from trio
    time ``from_at`` on; completions take ``completion_s`` and fail when ``completions_fail``."""

    health: Health | None = None
    from_at: float = 0.0
    completion_s: float = 0.0
    completions_fail: bool = False
    completions_refused: bool = False
    completions_no_verdict: int = 0
    """The next this many completions lose their deadline to our own late loop."""
    completions: list[float] = attrs.Factory(list)


@attrs.define
class _Wrapped:
    inner: Prober
    faults: Faults

    async def report(self, flavor: Flavor, *, stretch_s: float = 0.0) -> ServerReport:
        report = await self.inner.report(flavor)
        health = self.faults.health
        if health is None or trio.current_time() < self.faults.from_at:
            return report
        return attrs.evolve(report, health=health)

    async def tiny_completion(self, model: str | None) -> CompletionResult:
        self.faults.completions.append(trio.current_time())
        await trio.sleep(self.faults.completion_s)
        if self.faults.completions_fail:
            raise BackendError("deep health: completion returned HTTP 500: boom")
        if self.faults.completions_refused:  # what parse_completion makes of a 401
            raise RequestRefused("deep health: refused", "HTTP 401: Invalid API Key")
        if self.faults.completions_no_verdict > 0:  # what the wire says of a late deadline
            self.faults.completions_no_verdict -= 1
            raise NoVerdict("deep health: POST /v1/chat/completions: no verdict")
        result = await self.inner.tiny_completion(model)
        return attrs.evolve(result, latency_s=self.faults.completion_s)

    async def props(self) -> Mapping[str, object] | None:
        return await self.inner.props()

    async def aclose(self) -> None:
        await self.inner.aclose()


def wrapping(factory: ProberFactory, faults: Faults) -> ProberFactory:
    def open_prober(
        base: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        return _Wrapped(factory(base, timeout_s, headers=headers), faults)

    return open_prober


@attrs.define
class Harness:
    runtime: InferRuntime
    events: trio.MemoryReceiveChannel[Event]
    faults: Faults
    fleet: FakeFleet
    seen: list[Event] = attrs.Factory(list)

    def drain(self) -> list[Event]:
        while True:
            try:
                self.seen.append(self.events.receive_nowait())
            except trio.WouldBlock:
                return self.seen

    def of(self, kind: type[E]) -> list[E]:
        return [event for event in self.drain() if isinstance(event, kind)]

    async def next(self, kind: type[E], within_s: float = 100.0) -> E:
        """The first event of ``kind`` not yet in ``seen``, within ``within_s`` virtual s."""
        with trio.fail_after(within_s):
            async for event in self.events:
                self.seen.append(event)
                if isinstance(event, kind):
                    return event
        raise AssertionError("the event channel closed")

    async def load_running(self, supervision: Supervision | None = None) -> InstanceHandle:
        handle = await self.runtime.load(SPEC, supervision)
        await self.runtime.start(handle)
        with trio.fail_after(100):
            await self.runtime.wait_state(handle, InstanceState.RUNNING)
        return handle


@pytest.fixture
def config(tmp_path: Path, tiny_gguf: Path) -> InferConfig:
    registry = tmp_path / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="tiny")
    managed = ManagedConfig(
        registry=registry,
        data_root=tmp_path / "state",
        serve_program=Path("/bin/true"),  # never run: the fleet's spawner is a fake
        readiness_timeout_s=60.0,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=30.0)


@pytest.fixture
async def harness(config: InferConfig) -> AsyncIterator[Harness]:
    fleet, faults = FakeFleet(), Faults()
    edges = fleet.edges()
    edges = attrs.evolve(edges, open_prober=wrapping(edges.open_prober, faults))
    async with open_runtime(config, node_id="truth", edges=edges) as runtime:
        yield Harness(runtime, await runtime.subscribe(buffer=1000), faults, fleet)


def details(h: Harness) -> list[str]:
    return [event.detail or "" for event in h.of(StateChanged)]


async def test_a_failing_health_with_working_completions_is_degraded_not_killed(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await harness.load_running()
    bad_at = trio.current_time() + 5.0
    harness.faults.health, harness.faults.from_at = BROKEN, bad_at
    await trio.sleep(5.0 + 25.0)
    assert harness.of(ProcessExited) == []  # far past the 3 s health-kill window
    status = harness.runtime.status(handle)
    assert (status.state, status.detail) == (
        InstanceState.DEGRADED,
        "health endpoint failing (/health returned HTTP 500); completions work",
    )
    confirming = [at - bad_at for at in harness.faults.completions if at >= bad_at]
    assert len(confirming) == 3  # at once, then at most every CONFIRM_EVERY_S
    assert all(b - a >= CONFIRM_EVERY_S for a, b in pairwise(confirming))
    assert confirming[0] < 1.0
    said = details(harness)
    assert said.index(
        "health endpoint failing (/health returned HTTP 500); checking with one completion"
    ) < said.index("health endpoint failing (/health returned HTTP 500); completions work")


async def test_when_completions_fail_too_the_health_kill_applies(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    await harness.load_running()
    bad_at = trio.current_time() + 5.0
    harness.faults.health, harness.faults.from_at = BROKEN, bad_at
    harness.faults.completions_fail = True
    exited = await harness.next(ProcessExited)
    assert exited.reason is StopReason.HEALTH_KILL
    assert bad_at + UNHEALTHY_KILL_AFTER_S <= exited.at < bad_at + UNHEALTHY_KILL_AFTER_S + 2.0
    assert any("completions fail too (deep health: completion" in d for d in details(harness))


async def test_busy_is_running_and_never_killed(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await harness.load_running()
    harness.faults.health = Busy("no slot available")
    harness.faults.from_at = trio.current_time()
    await trio.sleep(20.0)
    status = harness.runtime.status(handle)
    assert (status.state, status.detail, status.last_probe) == (
        InstanceState.RUNNING,
        "busy: no slot available",
        "busy",
    )
    assert harness.of(ProcessExited) == []


async def test_a_slow_first_token_is_degraded_slow_with_its_exact_ttft(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.faults.completion_s = 12.25
    handle = await harness.runtime.load(SPEC, Supervision(slow_after_s=10.0))
    await harness.runtime.start(handle)
    passed = await harness.next(DeepHealthPassed)
    assert passed.ttft_s == 12.25
    await trio.sleep(5.0)  # the watch goes on: ready, not restarted, still slow
    assert harness.of(ProcessExited) == []
    assert len(harness.of(DeepHealthPassed)) == 1
    status = harness.runtime.status(handle)
    assert (status.state, status.detail, status.ttft_s) == (
        InstanceState.DEGRADED,
        "slow: first token in 12.2 s (threshold 10.0 s)",
        12.25,
    )


async def test_the_first_token_waits_the_instances_deep_timeout_not_the_runtimes(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.faults.completion_s = 5.0  # within the runtime's 30 s, not within 2 s
    handle = await harness.runtime.load(SPEC, Supervision(deep_timeout_s=2.0))
    await harness.runtime.start(handle)
    await trio.sleep(20.0)
    status = harness.runtime.status(handle)
    assert status.state is InstanceState.DEGRADED
    assert "the first token failed" in (status.detail or "")
    assert "2 s" in (status.detail or "")
    assert harness.of(DeepHealthPassed) == []


REFILL = Supervision(
    restart=RestartPolicy(max_restarts=1, base_s=0.5, cap_s=0.5, jitter=0.0, stable_after_s=60.0),
    slow_after_s=10.0,
)


async def _crash_and_restart(h: Harness) -> None:
    """Crash the live server; the restart's server comes up again."""
    h.fleet.last.crash(exit_code=1)
    assert (await h.next(RestartScheduled)).attempt == 1
    await h.next(ProcessStarted)


async def test_a_slow_but_serving_degraded_server_refills_the_restart_budget(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """Degraded (slow) serves: 70 s of it refill the budget as 70 s of Running do, so the
    next crash is restarted, not the end (issue 9: only Running refilled it)."""
    harness.faults.completion_s = 12.0
    handle = await harness.runtime.load(SPEC, REFILL)
    await harness.runtime.start(handle)
    await harness.next(DeepHealthPassed)
    await _crash_and_restart(harness)  # the one restart of the budget is spent
    await harness.next(DeepHealthPassed)
    status = harness.runtime.status(handle)
    assert (status.state, status.serving) == (InstanceState.DEGRADED, True)
    assert (status.detail or "").startswith("slow: ")
    await trio.sleep(70.0)
    await _crash_and_restart(harness)  # refilled: restart 1 again, no GaveUp
    assert harness.of(GaveUp) == []


async def test_a_health_confirmed_degraded_server_refills_the_restart_budget(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """``/health`` failing while completions work is serving too; the completion re-sent
    every `CONFIRM_EVERY_S` (pending meanwhile) does not break the stretch."""
    handle = await harness.runtime.load(SPEC, REFILL)
    await harness.runtime.start(handle)
    await harness.runtime.wait_state(handle, InstanceState.RUNNING)
    await _crash_and_restart(harness)
    await harness.runtime.wait_state(handle, InstanceState.RUNNING)
    harness.faults.health, harness.faults.from_at = BROKEN, trio.current_time() + 1.0
    await trio.sleep(75.0)
    status = harness.runtime.status(handle)
    assert (status.state, status.serving) == (InstanceState.DEGRADED, True)
    assert (status.detail or "").endswith("; completions work")
    await _crash_and_restart(harness)
    assert harness.of(GaveUp) == []


async def test_a_degraded_server_whose_completions_are_not_confirmed_does_not_refill(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """Degraded "loading model" after Running: no completion says it serves, so 70 s of it
    refill nothing and the next crash spends the budget."""
    handle = await harness.runtime.load(SPEC, REFILL)
    await harness.runtime.start(handle)
    await harness.runtime.wait_state(handle, InstanceState.RUNNING)
    await _crash_and_restart(harness)
    await harness.runtime.wait_state(handle, InstanceState.RUNNING)
    harness.faults.health, harness.faults.from_at = Loading(), trio.current_time()
    await trio.sleep(70.0)
    status = harness.runtime.status(handle)
    assert (status.state, status.detail, status.serving) == (
        InstanceState.DEGRADED,
        "loading model",
        False,
    )
    harness.fleet.last.crash(exit_code=1)
    assert (await harness.next(GaveUp)).why == "restart budget spent (1 of 1); last: exit status 1"


async def test_a_first_token_refused_for_want_of_a_key_is_a_config_error_at_once(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """A server that lists its models to anyone but refuses completions without the key
    (newer llama-server builds): stopped at once, not held until the readiness deadline."""
    harness.faults.completions_refused = True
    handle = await harness.runtime.load(SPEC, REFILL)
    started = trio.current_time()
    await harness.runtime.start(handle)
    gave_up = await harness.next(GaveUp)
    said = "the server refuses our requests (HTTP 401: Invalid API Key): set serve.api_key_file"
    assert (gave_up.attempts, gave_up.why) == (0, f"config-error: {said}")
    assert gave_up.at - started < 5.0  # the readiness deadline is 60 s
    (exited,) = harness.of(ProcessExited)
    assert exited.reason is StopReason.STARTUP_FAILURE
    assert exited.diagnosis is not None
    assert exited.diagnosis.describe() == said


async def test_a_first_token_without_a_verdict_is_asked_again_never_a_failure(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """Readiness's first token whose deadline our own late loop ate says nothing: the
    server is never "the first token failed", and the next probe asks again."""
    harness.faults.completions_no_verdict = 3
    handle = await harness.load_running()
    assert len(harness.faults.completions) == 4
    assert not any("first token failed" in d for d in details(harness))
    assert (harness.runtime.status(handle)).state is InstanceState.RUNNING


async def test_a_confirmation_without_a_verdict_is_no_failure_of_the_completions(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """``/health`` fails while every confirming completion gives no verdict: the check
    stays under way (asked again at each probe), the server is not killed for health."""
    handle = await harness.load_running()
    harness.faults.health, harness.faults.from_at = BROKEN, trio.current_time()
    harness.faults.completions_no_verdict = 1000
    await trio.sleep(30.0)
    assert harness.of(ProcessExited) == []
    status = harness.runtime.status(handle)
    assert (status.state, status.detail) == (
        InstanceState.DEGRADED,
        "health endpoint failing (/health returned HTTP 500); checking with one completion",
    )
    assert not any("completions fail too" in d for d in details(harness))
    assert len(harness.faults.completions) >= 20  # asked again at (nearly) every probe


async def test_a_watchdog_check_without_a_verdict_never_kills(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    watchdog = Watchdog(interval_s=2.0, timeout_s=1.0, failures=1)
    handle = await harness.load_running(Supervision(watchdog=watchdog))
    harness.faults.completions_no_verdict = 1000
    await trio.sleep(30.0)
    assert harness.of(ProcessExited) == []
    assert (harness.runtime.status(handle)).state is InstanceState.RUNNING
    harness.faults.completions_no_verdict, harness.faults.completions_fail = 0, True
    exited = await harness.next(ProcessExited)  # one on-time failure is enough
    assert exited.reason is StopReason.HEALTH_KILL
