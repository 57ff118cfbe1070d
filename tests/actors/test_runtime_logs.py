"""`InferRuntime.logs` and `follow_logs` (issue 10 item 4): a managed server's lines, kept
in the instance's ring across a crash and its restart, each with its process's pid; real
fake llama-servers that crash 0.6 s after they listen."""

from __future__ import annotations

import itertools

import pytest
import trio

from inferactors import InferRuntime, ProcessStarted
from inferactors._edges.log_ring import LogLine
from inferactors.testing import CrashAt, RuntimeKit

LISTENING = "inferactors fake server (llamacpp) listening on "
CRASH = "inferactors fake server: crash"


async def wait_starts(events: trio.MemoryReceiveChannel[object], count: int) -> list[int]:
    pids: list[int] = []
    async for event in events:
        if isinstance(event, ProcessStarted):
            pids.append(event.pid)
            if len(pids) == count:
                return pids
    raise AssertionError("the event stream ended")


@pytest.mark.inferactors_faults(CrashAt(after_s=0.6, exit_code=3))
async def test_the_ring_keeps_both_lives_of_a_crashed_and_restarted_server(
    inferactors_runtime: InferRuntime, inferactors_kit: RuntimeKit
) -> None:
    runtime = inferactors_runtime
    events = await runtime.subscribe()
    handle = await runtime.load(inferactors_kit.spec())
    followed: list[LogLine] = []
    with runtime.follow_logs(handle) as follow:
        await runtime.start(handle)
        with trio.fail_after(30):
            first, second = await wait_starts(events, 2)
            while not any(line.pid == second for line in followed):
                followed.append(await follow.receive())
    lines = runtime.logs(handle, 1000)
    assert [line.pid for line in lines if line.text.startswith(LISTENING)] == [first, second]
    crash = [line for line in lines if line.text == f"{CRASH} (exit status 3)"]
    # the first life's crash; the second one's too when it came (0.6 s in) before this read
    assert [(line.stream, line.pid) for line in crash][:1] == [("stderr", first)]
    assert {line.pid for line in crash} <= {first, second}
    assert [line.text for line in followed] == [line.text for line in lines][: len(followed)]
    assert all(a.at <= b.at for a, b in itertools.pairwise(lines))
    assert runtime.logs(handle, 1) == lines[-1:]
