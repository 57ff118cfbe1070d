"""Many instances are admitted at once, each admission's probe bounded together (issue 11
item 1: "many instances admitted concurrently"): 100 adopted loads whose probes take 1 s
each finish in about ceil(100 / PROBING) s, never more than `PROBING` probes at a time.

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
