"""Many instances are admitted at once, each admission's probe bounded together (issue 11
item 1: "many instances admitted concurrently"): 100 adopted loads whose probes take 1 s
each finish in about ceil(100 / PROBING) s, never more than `PROBING` probes at a time; the
adopted starts that must probe again share that bound, and the others wait for no turn.

MockClock; a prober that takes a second per report (no network).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import trio
import trio.testing

from actors.adopted_support import QuietNet
from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs, open_runtime
from inferactors._actors.admission_probes import ADMISSION_PROBES
from inferactors._actors.instance.probing import ADMISSION_REUSE_S
from inferactors._actors.runtime import PROBING
from inferactors._edges.bundle import Edges
from inferactors._edges.probe import Prober
from inferactors._policy.probe_report import CompletionResult, ServerReport, Up

LOADS = 100
PROBE_S = 1.0


@attrs.define
class SlowProbes:
    """Every report takes `PROBE_S`; counts how many run at once."""

    running: int = 0
    most: int = 0

    def open(
        self, base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        return _SlowProber(self)


@attrs.define
class _SlowProber:
    probes: SlowProbes

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport:
        self.probes.running += 1
        self.probes.most = max(self.probes.most, self.probes.running)
        try:
            await trio.sleep(PROBE_S)
        finally:
            self.probes.running -= 1
        return ServerReport(Up(), models=("tiny",))

    async def tiny_completion(self, model: str | None) -> CompletionResult:
        raise AssertionError("an adopted server is never sent a completion")

    async def props(self) -> Mapping[str, object] | None:
        return None

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_hundred_loads_are_admitted_together_within_the_probe_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probes = SlowProbes()
    edges = Edges(open_prober=probes.open, net=QuietNet())
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    async with open_runtime(config, edges=edges) as runtime:
        began = trio.current_time()
        async with trio.open_nursery() as nursery:
            for port in range(21000, 21000 + LOADS):
                spec = InferenceSpec(
                    role=f"r{port}", runtime=InferFlavor.LLAMACPP, model="tiny",
                    serve=ServeArgs(port=port),
                )  # fmt: skip
                nursery.start_soon(runtime.load, spec)
        took = trio.current_time() - began
        assert len(await runtime.instances()) == LOADS
    assert probes.most == PROBING
    assert took <= math.ceil(LOADS / PROBING) * PROBE_S + 0.5  # not LOADS x PROBE_S


@attrs.define
class OneShotProbes:
    """Every report takes `PROBE_S`; keeps the span of each prober closed after exactly one
    report (an admission's probe: `probe_once`), never a monitor's kept prober's."""

    spans: list[tuple[float, float]] = attrs.Factory(list)

    def open(
        self, base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        return _OneShot(SlowProbes(), shots=self)

    def most_at_once(self) -> int:
        edges = sorted([(at, 1) for at, _ in self.spans] + [(at, -1) for _, at in self.spans])
        running = most = 0
        for _, step in edges:  # an end sorts before a start at the same time
            running += step
            most = max(most, running)
        return most


@attrs.define
class _OneShot(_SlowProber):
    shots: OneShotProbes = attrs.field(kw_only=True)
    made: list[tuple[float, float]] = attrs.Factory(list)

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport:
        began = trio.current_time()
        report = await super().report(flavor, stretch_s=stretch_s)
        self.made.append((began, trio.current_time()))
        return report

    async def aclose(self) -> None:
        if len(self.made) == 1:
            self.shots.spans.append(self.made[0])
        await super().aclose()


async def test_adopted_starts_that_must_probe_share_the_bound_and_others_wait_for_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A start whose load's report went stale probes within the same bound as the loads
    (`ADMISSION_PROBES` at once); a start that reuses its load's report probes nothing and
    waits for no turn, however many probes hold the bound meanwhile."""
    assert ADMISSION_PROBES == PROBING
    shots = OneShotProbes()
    edges = Edges(open_prober=shots.open, net=QuietNet())
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    specs = [
        InferenceSpec(
            role=f"r{port}", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
        )
        for port in range(22000, 22000 + LOADS + 1)
    ]
    async with open_runtime(config, edges=edges) as runtime:
        handles = [await runtime.load(spec) for spec in specs[:LOADS]]
        await trio.sleep(ADMISSION_REUSE_S + 1.0)  # their reports are stale now
        fresh = await runtime.load(specs[LOADS])
        began = trio.current_time()
        shots.spans.clear()
        async with trio.open_nursery() as nursery:
            for handle in handles:
                nursery.start_soon(runtime.start, handle)
            await trio.sleep(0.5)  # every turn taken by a stale start's probe, 68 waiting
            await runtime.start(fresh)  # starts on its load's report, waiting for no turn
            assert trio.current_time() - began < PROBE_S
        took = trio.current_time() - began
        assert len(shots.spans) == LOADS  # the stale starts' probes
        assert shots.most_at_once() == ADMISSION_PROBES
    assert took <= (math.ceil(LOADS / ADMISSION_PROBES) + 1) * PROBE_S + 0.5
