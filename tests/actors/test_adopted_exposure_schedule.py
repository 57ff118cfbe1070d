"""An adopted server's exposure check runs once per `ADOPTED_EXPOSURE_S`, on the server's
own phase: the first falls that fraction of a period after its first serving probe, so
servers adopted together are checked spread out rather than each at its admission (at
1,000 adopted servers the checks every 5 s from admission took 14% of the supervisor's
CPU, and a thousand at once while the CPU was shortest).

MockClock; the fake llama-server seen through httpx (``actors.adopted_support``), the
socket tables replaced by a stand-in that records when each port was checked.
"""

from __future__ import annotations

import itertools

import attrs
import httpx
import pytest
import trio
import trio.testing

from actors.adopted_support import FakeLlama, QuietNet, chat
from inferactors import Edges, InferConfig, InferFlavor, http_prober_factory, open_runtime
from inferactors._actors.instance.probe_look import ADOPTED_EXPOSURE_S, ProbeLook
from inferactors._policy.probe_schedule import phase_of


@attrs.frozen
class CheckedPorts(QuietNet):
    """`QuietNet` that records the trio time of each adopted port's exposure check."""

    checks: dict[int, list[float]] = attrs.Factory(dict)

    async def port_exposure(self, port: int) -> None:
        self.checks.setdefault(port, []).append(trio.current_time())
        await trio.lowlevel.checkpoint()


async def test_the_first_check_falls_on_the_phase_then_one_per_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    look = ProbeLook(token_ok=True, exposure_phase=0.25)
    began = trio.current_time()
    due: list[float] = []
    for _ in range(100):  # a probe a second for 100 s
        if look.exposure_due():
            due.append(trio.current_time() - began)
        await trio.sleep(1.0)
    first = 0.25 * ADOPTED_EXPOSURE_S
    assert due == [pytest.approx(first + k * ADOPTED_EXPOSURE_S, abs=1.0) for k in range(4)]


async def test_phase_zero_checks_at_the_first_serving_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    look = ProbeLook(token_ok=True)
    assert look.exposure_due()
    await trio.sleep(ADOPTED_EXPOSURE_S - 1.0)
    assert not look.exposure_due()
    await trio.sleep(1.0)
    assert look.exposure_due()


async def test_servers_adopted_together_are_checked_spread_over_the_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = CheckedPorts()
    prober = http_prober_factory(httpx.MockTransport(FakeLlama().handle))
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    ports = list(range(9100, 9120))
    async with open_runtime(
        config, node_id="n", edges=Edges(open_prober=prober, net=net), open_prober=prober
    ) as runtime:
        began = trio.current_time()
        for port in ports:
            await runtime.start(await runtime.load(chat(port, role=f"s{port}")))
        await trio.sleep(2 * ADOPTED_EXPOSURE_S + 5.0)
    firsts = []
    for port in ports:
        times = [at - began for at in net.checks[port]]
        phase = phase_of(f"http://127.0.0.1:{port}")
        assert times[0] == pytest.approx(phase * ADOPTED_EXPOSURE_S, abs=1.5)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert gaps
        assert all(ADOPTED_EXPOSURE_S - 1e-6 <= gap <= ADOPTED_EXPOSURE_S + 1.0 for gap in gaps)
        firsts.append(times[0])
    assert max(firsts) - min(firsts) > ADOPTED_EXPOSURE_S / 2  # spread, not all at once
