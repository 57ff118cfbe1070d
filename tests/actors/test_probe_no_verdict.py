"""A probe that timed out only because our own event loop ran late says nothing about the
server (issue 11: at 1,000 adopted servers on 2 cores, healthy servers were reported
exited): the monitor posts it only as a no-verdict (how long none judged, for the status to
say; `verdicts.judge_report` judges nothing of it) and keeps its running schedule, however
long the loop stays late; the next probe made on time judges (a hung server is then
judged).

MockClock; a scripted prober (``actors.monitor_support``).
"""

from __future__ import annotations

import trio
import trio.testing

from actors.monitor_support import Script, drain, probing
from inferactors._actors.instance.messages import Probed
from inferactors._policy.probe_report import Unreachable, Up
from inferactors._policy.probe_schedule import RUNNING_PROBE_S

PORT = 20100
LATE_PROBES = 5


def _verdicts(probes: list[Probed]) -> list[Probed]:
    return [item for item in probes if not item.report.no_verdict]


async def test_reports_without_a_verdict_are_not_verdicts_and_keep_the_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    send, receive = trio.open_memory_channel[object](1000)
    seen: list[Probed] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen)
        nursery.start_soon(probing(script, PORT, send).monitor, None, trio.CancelScope())
        await trio.sleep(3.0)
        up_before = len(seen)
        script.overloaded = True
        await trio.sleep(LATE_PROBES * RUNNING_PROBE_S - 0.1)
        during = len(_verdicts(seen)) - up_before
        said = [item.no_verdict_for_s for item in seen[up_before:]]
        calls_late = [at for at, _, _ in script.calls if 3.0 <= at < 2.9 + LATE_PROBES]
        script.overloaded = False
        await trio.sleep(3.0)
        nursery.cancel_scope.cancel()
    assert up_before >= 2
    assert all(isinstance(item.report.health, Up) for item in _verdicts(seen))  # never false
    assert during == 0
    assert said == sorted(said)  # posted only as no-verdicts, saying how long
    assert 0.0 < said[-1] <= LATE_PROBES * RUNNING_PROBE_S
    assert len(calls_late) == LATE_PROBES  # once a second, not the start-up pace
    assert len(seen) > up_before  # verdicts again once the loop keeps time


async def test_a_loop_that_stays_late_judges_nothing_and_the_next_on_time_probe_judges(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before, the fourth late probe in a row was judged as a timeout ("judge after 3 late
    probes"): a healthy server read Exited while only the supervisor was overloaded. Now no
    count of late probes is ever a verdict; the first probe made on time is, and a server
    that really hangs then reads as the timeout it is."""
    script = Script()
    send, receive = trio.open_memory_channel[object](1000)
    seen: list[Probed] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen)
        nursery.start_soon(probing(script, PORT, send).monitor, None, trio.CancelScope())
        await trio.sleep(3.0)
        before = len(seen)
        script.overloaded = True
        await trio.sleep(20.0)  # twenty late probes in a row
        during = len(_verdicts(seen)) - before
        script.overloaded, script.hung = False, True  # on time again; the server hangs
        await trio.sleep(1.5)
        nursery.cancel_scope.cancel()
    assert during == 0
    judged = [item.report.health for item in _verdicts(seen)[before:]]
    assert judged
    assert all(isinstance(health, Unreachable) for health in judged)
    assert not any(health.overloaded for health in judged if isinstance(health, Unreachable))
