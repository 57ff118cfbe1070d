"""The monitor's timers under MockClock: a runtime's first 50 instances probe on the 200 ms
grid, ten to a slot in load order, the later ones spread (``_policy/probe_schedule.py``),
and a readiness line that makes the monitor probe at once and ask the first token without
probing again."""

from __future__ import annotations

from collections import Counter

import trio
import trio.testing

from actors.adopted_support import QuietNet
from actors.monitor_support import MODEL, Script, StandIn, drain, probing
from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs, open_runtime
from inferactors._actors.instance.messages import Probed
from inferactors._edges.bundle import Edges
from inferactors._policy.probe_schedule import RUNNING_PROBE_S, probe_phase

INSTANCES = 100
FIRST_PORT = 20000
LOADED = b"0.00.015.172 I srv  llama_server: model loaded\n"


async def test_a_runtimes_first_fifty_share_probe_ticks_ten_to_a_slot_and_the_rest_spread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    edges = Edges(open_prober=script.open, net=QuietNet(), measure_loop_lag=False)
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    ports = list(range(FIRST_PORT, FIRST_PORT + INSTANCES))
    async with open_runtime(config, node_id="n", edges=edges, open_prober=script.open) as runtime:
        for port in ports:
            await runtime.start(await runtime.load(spec_on(port)))
        began = trio.current_time()
        await trio.sleep(10.0)
    steady = [(at - began, port) for at, port, call in script.calls if call == "report"]
    steady = [(at, port) for at, port in steady if 5.0 <= at < 9.0]
    assert Counter(port for _, port in steady) == dict.fromkeys(ports, 4)  # 1 Hz, none skipped
    for ordinal, port in enumerate(ports):
        phases = {round((began + at) % RUNNING_PROBE_S, 6) for at, p in steady if p == port}
        assert phases == {round(probe_phase(ordinal), 6)}  # its own, steady
        if ordinal < 50:
            assert phases == {round((ordinal // 10) * 0.2, 6)}  # 10 a slot, in load order
    instants = Counter(round(at, 6) for at, _ in steady)
    assert len(instants) == 4 * (5 + INSTANCES - 50)  # the 50 others each at its own phase
    assert max(instants.values()) == 10


def spec_on(port: int) -> InferenceSpec:
    return InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model=MODEL, serve=ServeArgs(port=port)
    )


async def loaded_at(
    script: Script, line: bytes | None, until_s: float = 0.5
) -> list[tuple[float, str]]:
    """Run one managed monitor (phase 0) whose server loads at 0.205 s (and prints ``line``
    then, when given); the prober's calls until ``until_s``, as ``(time, call)``."""
    process = StandIn()
    send, receive = trio.open_memory_channel[object](1000)
    seen: list[Probed] = []
    script.loaded = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen)
        work = probing(script, FIRST_PORT, send)
        nursery.start_soon(work.monitor, process.as_process(), trio.CancelScope())
        await trio.sleep(0.205)
        script.loaded = True
        if line is not None:
            process.lines.stderr.feed(line)
        await trio.sleep(until_s - 0.205)
        nursery.cancel_scope.cancel()
    assert any(probed.first_token == "" for probed in seen)
    return [(round(at, 6), call) for at, _, call in script.calls]


async def test_a_model_loaded_line_is_probed_at_once_and_its_token_asked_without_a_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    calls = await loaded_at(script, LOADED, until_s=1.5)
    after = [call for call in calls if call[0] >= 0.205]
    assert after[:2] == [(0.205, "report"), (0.205, "token")]  # no probe between the two
    assert after[2:] == [(1.0, "report")]  # then its running tick
    assert script.opened == 2  # the monitor's prober and the token's; no prober to re-probe


async def test_without_a_line_the_timed_schedule_finds_the_server_at_its_next_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = await loaded_at(Script(), None)
    times = [at for at, call in calls if call == "report"]
    assert times[:5] == [0.0, 0.02, 0.06, 0.14, 0.24]  # doubling to the 100 ms cap
    token = next(at for at, call in calls if call == "token")
    assert token == 0.24  # the first tick after the load, 35 ms late
