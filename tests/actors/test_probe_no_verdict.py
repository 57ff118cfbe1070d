"""A probe that timed out only because our own event loop ran late says nothing about the
server (issue 11: at 1,000 adopted servers on 2 cores, healthy servers were reported
exited): the monitor posts no verdict for it and keeps its running schedule.

MockClock; a scripted prober (``actors.monitor_support``).
"""

from __future__ import annotations

import trio
import trio.testing

from actors.monitor_support import Script, drain, probing
from inferactors._actors.instance.messages import Probed
from inferactors._actors.instance.probing import NO_VERDICT_LIMIT
from inferactors._policy.probe_parse import Unreachable, Up
from inferactors._policy.probe_schedule import RUNNING_PROBE_S

PORT = 20100


async def test_reports_without_a_verdict_are_not_posted_and_keep_the_schedule(
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
        await trio.sleep(NO_VERDICT_LIMIT * RUNNING_PROBE_S - 0.1)  # within the limit
        during = len(seen) - up_before
        calls_late = [at for at, _, _ in script.calls if 3.0 <= at < 5.9]
        script.overloaded = False
        await trio.sleep(3.0)
        nursery.cancel_scope.cancel()
    assert up_before >= 2
    assert all(isinstance(item.report.health, Up) for item in seen)  # never a false verdict
    assert during == 0
    assert len(calls_late) == NO_VERDICT_LIMIT  # once a second, not the start-up pace
    assert len(seen) > up_before  # verdicts again once the loop keeps time


async def test_a_loop_that_stays_late_no_longer_hides_the_server(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    send, receive = trio.open_memory_channel[object](1000)
    seen: list[Probed] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, seen)
        nursery.start_soon(probing(script, PORT, send).monitor, None, trio.CancelScope())
        await trio.sleep(3.0)
        script.overloaded = True
        await trio.sleep(NO_VERDICT_LIMIT * RUNNING_PROBE_S + 2.0)
        nursery.cancel_scope.cancel()
    judged = [item.report.health for item in seen if not isinstance(item.report.health, Up)]
    assert judged  # past the limit, the timeout is judged as one
    assert all(isinstance(health, Unreachable) for health in judged)
