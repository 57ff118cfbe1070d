"""The wait for a verdict is bounded (``_policy/lateness.py`` `VerdictBound`): under an
overload that never ends, a server that really hangs is still judged, first by a probe
whose deadline is stretched by our measured lateness (judged on a fair budget), and at
the latest at the bound (`NO_VERDICT_BOUND_S` of trio time since its last verdict); a
healthy server is never judged meanwhile. Before, every late probe was thrown away whole,
so a hung server read Running for as long as the overload lasted (90 s+ at 300 adopted
servers).

MockClock; a scripted prober (``actors.monitor_support``).
"""

from __future__ import annotations

import trio
import trio.testing

from actors.monitor_support import Script, drain, probing
from inferactors._actors.instance.messages import Probed
from inferactors._policy.lateness import JUDGE_AFTER_TIMEOUTS, NO_VERDICT_BOUND_S
from inferactors._policy.probe_report import Unreachable, Up

PORT = 20110
TIMEOUT_S = 2.0  # InferConfig's probe_timeout_s


async def _watch(
    script: Script, *, overloaded_for: float, hang: bool = False, times: list[float] | None = None
) -> tuple[list[Probed], int, float]:
    """Run the monitor: 3 s healthy, then ``overloaded_for`` s overloaded (the server
    hanging too when ``hang``); the probes posted, how many were posted before the
    overload, and the trio time it began (``times``: when each was posted)."""
    send, receive = trio.open_memory_channel[object](1000)
    seen: list[Probed] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen, times)
        nursery.start_soon(probing(script, PORT, send).monitor, None, trio.CancelScope())
        await trio.sleep(3.0)
        before, began = len(seen), trio.current_time()
        script.overloaded, script.hung = True, hang
        await trio.sleep(overloaded_for)
        nursery.cancel_scope.cancel()
    return seen, before, began


async def test_a_hung_server_under_a_lasting_overload_is_judged_by_a_stretched_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script(fair_when_stretched=True)
    seen, before, began = await _watch(script, overloaded_for=30.0, hang=True)
    judged = _judged(seen[before:])
    assert judged, "a hung server was never judged under a lasting overload"
    health = judged[0].report.health
    assert isinstance(health, Unreachable)
    assert not health.overloaded
    assert "no complete reply within 2 s" in health.why  # the stretched probe's own verdict
    asked = [
        (at, stretch)
        for (at, _, _), stretch in zip(script.calls, script.stretches, strict=True)
        if at >= began
    ]
    stretched = [(at, stretch) for at, stretch in asked if stretch > 0]
    assert stretched
    assert all(TIMEOUT_S <= stretch <= 4 * TIMEOUT_S for _, stretch in stretched)
    assert stretched[0][0] - began >= JUDGE_AFTER_TIMEOUTS * TIMEOUT_S - 1.0  # not before
    assert stretched[0][0] - began < NO_VERDICT_BOUND_S  # judged before the bound


async def test_a_hung_server_is_judged_at_the_hard_bound_even_when_no_probe_is_fair(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()  # every probe, stretched or not, loses its verdict to our lateness
    seen, before, _ = await _watch(script, overloaded_for=NO_VERDICT_BOUND_S + 3)
    judged = _judged(seen[before:])
    assert len(judged) >= 1
    health = judged[0].report.health
    assert isinstance(health, Unreachable)
    assert not health.overloaded
    assert "judged: no verdict for" in health.why


async def test_a_healthy_server_is_not_judged_before_the_hard_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    seen, before, _ = await _watch(script, overloaded_for=NO_VERDICT_BOUND_S - 2)
    assert seen[:before]
    assert all(isinstance(p.report.health, Up) for p in seen[:before])
    assert _judged(seen[before:]) == []  # a long overload, but within the bound: no verdict
    said = [p.no_verdict_for_s for p in seen[before:]]  # posted, saying how long
    assert said == sorted(said)
    assert said[-1] >= NO_VERDICT_BOUND_S - 4


async def test_the_bound_counts_seconds_since_the_last_verdict_stretched_probes_included(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every probe of a hung server loses its verdict and takes its whole (stretched)
    deadline: the verdict still comes within the bound, a probe interval and a probe
    timeout of the last verdict (before: the bound counted from the end of the first
    no-verdict probe and a stretched probe could run past it: 33 to 37 s)."""
    script = Script(slow_no_verdict=True)
    times: list[float] = []
    seen, before, began = await _watch(
        script, overloaded_for=NO_VERDICT_BOUND_S + 15, hang=True, times=times
    )
    last_verdict = times[before - 1]
    assert last_verdict <= began
    judged = [(at, p) for at, p in zip(times, seen, strict=True) if at > began]
    first = next((at, p) for at, p in judged if not p.report.no_verdict)
    assert first[0] - last_verdict <= NO_VERDICT_BOUND_S + 1.0 + TIMEOUT_S
    health = first[1].report.health
    assert isinstance(health, Unreachable)
    assert not health.overloaded
    assert health.why.endswith(f"(the bound is {NO_VERDICT_BOUND_S:g} s)")


def _judged(probes: list[Probed]) -> list[Probed]:
    """The probes that gave a verdict (the others are posted too, saying how long none
    has)."""
    return [p for p in probes if not p.report.no_verdict]
