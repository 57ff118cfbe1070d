"""Arrange code for tests of the monitor alone (`Probing.monitor`) under MockClock:
a scripted prober that records when it was asked what, a stand-in for a managed process
(its output lines and ids, nothing else), and the probing half of an instance around them.

Imported as ``actors.monitor_support``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import attrs
import trio

from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs
from inferactors._actors.instance.messages import Probed
from inferactors._actors.instance.probing import Probing
from inferactors._config.config import ControlMode
from inferactors._edges.output_lines import LineWatch
from inferactors._edges.probe import Prober
from inferactors._edges.process import ManagedProcess
from inferactors._policy.admission import Plan
from inferactors._policy.probe_report import (
    CompletionResult,
    Loading,
    ServerReport,
    Unreachable,
    Up,
)
from inferactors.testing import FakeFleet

MODEL = "tiny"


@attrs.define
class Script:
    """What every prober it opens answers, and a log of ``(trio time, port, call)``.

    ``loaded``: ``/health`` says Up listing `MODEL` (else Loading); ``overloaded``: every
    report is a timeout that our own late loop caused (no verdict); ``hung``: every report
    is a timeout on time (the server hangs); ``calls`` names each ``report`` and
    ``tiny_completion``, ``opened`` each prober opened. ``fair_when_stretched``: while
    ``overloaded`` and ``hung``, a stretched report (``stretch_s`` > 0) waits its stretched
    deadline and is a timeout judged on a fair budget (else no verdict, as our lateness
    still ate it); ``stretches`` records each report's ``stretch_s``. ``slow_no_verdict``:
    a no-verdict report takes its whole (stretched) deadline, as a real one does.
    """

    loaded: bool = True
    overloaded: bool = False
    hung: bool = False
    fair_when_stretched: bool = False
    slow_no_verdict: bool = False
    stretches: list[float] = attrs.Factory(list)
    calls: list[tuple[float, int, str]] = attrs.Factory(list)
    opened: int = 0

    def open(
        self, base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        self.opened += 1
        return ScriptedProber(self, int(base_url.rsplit(":", 1)[1]))


@attrs.define
class ScriptedProber:
    script: Script
    port: int

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport:
        await trio.lowlevel.checkpoint()
        self.script.calls.append((trio.current_time(), self.port, "report"))
        self.script.stretches.append(stretch_s)
        fair = self.script.fair_when_stretched and stretch_s > 0
        if self.script.overloaded and self.script.hung and fair:
            await trio.sleep(2.0 + stretch_s)  # the stretched deadline
            return ServerReport(Unreachable("GET /health: no complete reply within 2 s"))
        if self.script.overloaded:  # our own loop ran late: no verdict
            if self.script.slow_no_verdict:
                await trio.sleep(2.0 + stretch_s)
            return ServerReport(Unreachable("GET /health: no verdict", overloaded=True))
        if self.script.hung:
            return ServerReport(Unreachable("GET /health: no complete reply within 2 s"))
        if not self.script.loaded:
            return ServerReport(Loading())
        return ServerReport(Up(), models=(MODEL,))

    async def tiny_completion(self, model: str | None) -> CompletionResult:
        await trio.lowlevel.checkpoint()
        self.script.calls.append((trio.current_time(), self.port, "token"))
        return CompletionResult(" word", 0.0, "length")

    async def props(self) -> Mapping[str, object] | None:
        return None

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class StandIn:
    """What the monitor reads of a managed process: its lines and its ids."""

    lines: LineWatch = attrs.Factory(LineWatch)
    pid: int = 4242
    pgid: int = 4242
    escaped: tuple[int, ...] = ()
    running: bool = True

    def track_descendants(self) -> None:
        """Nothing to track."""

    def as_process(self) -> ManagedProcess:
        return cast(ManagedProcess, self)


def probing(script: Script, port: int, post: trio.MemorySendChannel[object]) -> Probing:
    """The probing half of an instance of a llama-server listing `MODEL` on ``port``."""
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model=MODEL, serve=ServeArgs(port=port)
    )
    plan = Plan(spec=spec, mode=ControlMode.ADOPTED, notes=())
    edges = attrs.evolve(FakeFleet().edges(), open_prober=script.open)
    return Probing(plan, InferConfig.adopted(InferFlavor.LLAMACPP), edges, post)


async def drain(
    receive: trio.MemoryReceiveChannel[object],
    into: list[Probed],
    times: list[float] | None = None,
) -> None:
    """Keep every `Probed` the monitors post (and its trio time in ``times``), until
    cancelled."""
    async for message in receive:
        if isinstance(message, Probed):
            into.append(message)
            if times is not None:
                times.append(trio.current_time())
