"""The readiness deadline of a real server under our own lateness: a loop really blocked
(a synchronous sleep, nothing mocked) through the deadline could not watch the server, so
the server gets the time lost back before it is killed (before, it was killed the moment
the late timer was heard); an on-time deadline still kills on time.

Real processes: the helper server (``tests/helpers/runtime_server.py``), silent (it never
listens), started by a managed runtime.
"""

from __future__ import annotations

import time

import pytest
import trio

from actors.managed_support import Lab, chat
from inferactors import (
    Event,
    ProcessExited,
    ProcessStarted,
    StopReason,
    Supervision,
    open_runtime,
)

READY_S = 1.0
BLOCK_S = 1.5


async def _until_exit(events: trio.MemoryReceiveChannel[Event]) -> tuple[float, ProcessExited]:
    """The spawn's trio time and the exit."""
    started = None
    with trio.fail_after(10):
        async for event in events:
            if isinstance(event, ProcessStarted):
                started = event.at
            if isinstance(event, ProcessExited):
                assert started is not None
                return started, event
    raise AssertionError("the event stream ended")


@pytest.mark.exclusive  # real-time bounds on the kill: the machine to itself
@pytest.mark.parametrize("blocked", [False, True])
async def test_a_readiness_deadline_our_stall_ate_is_given_its_time_back(
    lab: Lab, free_port: int, blocked: bool
) -> None:
    async with open_runtime(lab.config(behaviour="silent")) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=READY_S))
        await runtime.start(handle)
        if blocked:
            await trio.sleep(0.3)
            time.sleep(BLOCK_S)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)
        started, exited = await _until_exit(events)
    assert exited.reason is StopReason.READINESS_TIMEOUT
    took = exited.at - started
    if blocked:  # heard 0.8 s late with 1.5 s lost: killed 1.5 s after it was heard
        assert took >= 0.3 + BLOCK_S + 1.2, took
    else:
        assert took < READY_S + 0.9, took
