"""A managed server that listens beyond loopback is never announced Running: the probe
that finds it serving scans its sockets before the first token and before any Running
(``instance/probing.py``), so the exposure stop comes first. Before, the exposure watch's
next 200 ms tick found it after the monitor had said Running (serving), for ~170 ms at
rest and 756 ms after a stall.

MockClock; a `FakeFleet` whose socket table shows the server beyond loopback from its
spawn on (a real server binds before it answers). Before the fix the exposure was found
first, yet the token was sent and Running announced before the stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import attrs
import pytest
import trio
import trio.testing

from actors.managed_support import fake_fleet_config
from inferactors import (
    DeepHealthPassed,
    ExposureDetected,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ProcessExited,
    RestartPolicy,
    ServeArgs,
    StateChanged,
    open_runtime,
)
from inferactors._edges.netscan import NetScanner
from inferactors._policy.exposure import Exposure
from inferactors.testing import FakeFleet

PORT = 18570
SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=PORT)
)


@attrs.define
class ExposedFrom:
    """The fleet's socket table, showing every server beyond loopback from trio time
    ``since`` on."""

    inner: NetScanner
    since: float = float("inf")

    async def scan(self, pid: int, port: int) -> Exposure | None:
        await trio.lowlevel.checkpoint()
        if trio.current_time() >= self.since:
            return Exposure(reachable_on=("192.0.2.7",), listeners=(), port=port)
        return None

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_an_exposed_managed_server_is_stopped_before_it_is_ever_running(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, tiny_gguf: Path
) -> None:
    config = fake_fleet_config(tmp_path, tiny_gguf, RestartPolicy(max_restarts=0))
    fleet = FakeFleet()
    net = ExposedFrom(fleet.edges().net)
    edges = attrs.evolve(fleet.edges(), net=cast(NetScanner, net))
    async with open_runtime(config, node_id="expo", edges=edges) as runtime:
        events = await runtime.subscribe(buffer=1000)
        handle = await runtime.load(SPEC)
        net.since = trio.current_time()
        await runtime.start(handle)
        seen = []
        with trio.fail_after(10):
            async for event in events:
                seen.append(event)
                if isinstance(event, ProcessExited):
                    break
    kinds = [type(event).__name__ for event in seen]
    assert "ExposureDetected" in kinds, kinds
    running = [e for e in seen if isinstance(e, StateChanged) and e.new is InstanceState.RUNNING]
    assert running == [], kinds  # never announced Running (serving) while exposed
    assert not any(isinstance(event, DeepHealthPassed) for event in seen)  # no token sent
    exited = seen[-1]
    assert isinstance(exited, ProcessExited)
    assert exited.reason.value == "exposure"
    detected = next(e for e in seen if isinstance(e, ExposureDetected))
    assert exited.at - detected.at == pytest.approx(0.0, abs=0.25)
