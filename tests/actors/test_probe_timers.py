"""The monitor's timers under MockClock (issue 11 items 1 and 3): probes of many instances
spread over the second, and a readiness line that makes the monitor probe at once and ask
the first token without probing again."""

from __future__ import annotations

import itertools
from collections import Counter

import trio
import trio.testing

from actors.monitor_support import Script, StandIn, drain, probing
from inferactors._actors.instance.messages import Probed
from inferactors._policy.probe_schedule import RUNNING_PROBE_S

INSTANCES = 100
FIRST_PORT = 20000
LOADED = b"0.00.015.172 I srv  llama_server: model loaded\n"


async def test_a_hundred_monitors_started_together_spread_their_probes_over_the_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    send, receive = trio.open_memory_channel[object](10_000)
    seen: list[Probed] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen)
        for port in range(FIRST_PORT, FIRST_PORT + INSTANCES):
            nursery.start_soon(probing(script, port, send).monitor, None, trio.CancelScope())
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    steady = [(at, port) for at, port, _ in script.calls if 5.0 <= at < 9.0]
    assert len(steady) == 4 * INSTANCES  # each instance once a second, none skipped
    windows = Counter(int(at * 100) for at, _ in steady)  # 10 ms windows
    assert max(windows.values()) <= 4 * 4  # at most 4 probes in any 10 ms, in each second
    per_second = Counter(int((at % 1.0) * 100) for at, _ in steady if at < 6.0)
    assert max(per_second.values()) <= 4
    assert len(per_second) >= 50  # spread over at least half of the 10 ms windows
    by_port = sorted(steady, key=lambda call: call[1])
    for _, calls in itertools.groupby(by_port, key=lambda call: call[1]):
        times = [at for at, _ in calls]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(abs(gap - RUNNING_PROBE_S) < 1e-6 for gap in gaps)  # its own steady phase


async def loaded_at(script: Script, line: bytes | None) -> list[tuple[float, str]]:
    """Run one managed monitor whose server loads at 0.205 s (and prints ``line`` then, when
    given); the prober's calls until 0.5 s, as ``(time, call)``."""
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
        await trio.sleep(0.5 - 0.205)
        nursery.cancel_scope.cancel()
    assert any(probed.first_token == "" for probed in seen)
    return [(round(at, 6), call) for at, _, call in script.calls]


async def test_a_model_loaded_line_is_probed_at_once_and_its_token_asked_without_a_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    calls = await loaded_at(script, LOADED)
    after = [call for call in calls if call[0] >= 0.205]
    assert after[:2] == [(0.205, "report"), (0.205, "token")]  # no probe between the two
    assert after[2][0] > 0.205
    assert script.opened == 2  # the monitor's prober and the token's; no prober to re-probe


async def test_without_a_line_the_timed_schedule_finds_the_server_at_its_next_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = await loaded_at(Script(), None)
    times = [at for at, call in calls if call == "report"]
    assert times[:5] == [0.0, 0.02, 0.06, 0.14, 0.24]  # doubling to the 100 ms cap
    token = next(at for at, call in calls if call == "token")
    assert token == 0.24  # the first tick after the load, 35 ms late
