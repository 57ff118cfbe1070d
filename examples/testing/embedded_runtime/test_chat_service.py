"""The trio application against a managed runtime (the ``inferactors_runtime`` fixture),
whose fake llama-server crashes one second after it listens: inferactors restarts it.

The runtime fixture is async, so the tests run under trio: ``pytest.mark.trio`` (pytest-trio,
installed with ``inferactors[testing]``; the runtime kit also needs
``[testing-models]``). As root, the kit runs the servers as ``nobody``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from chat_service import start_chat

from inferactors import Event, InferRuntime, InstanceState, ProcessExited, ProcessStarted
from inferactors.testing import CrashAt, RuntimeKit

pytestmark = pytest.mark.trio


async def test_the_chat_server_answers_one_token(
    inferactors_runtime: InferRuntime, inferactors_kit: RuntimeKit
) -> None:
    handle = await start_chat(inferactors_runtime, inferactors_kit.spec())
    result = await inferactors_runtime.deep_health(handle)
    assert result.finish_reason == "length"


@pytest.mark.inferactors_faults(CrashAt(after_s=1.0, exit_code=3))
async def test_a_crashed_server_is_restarted(
    inferactors_runtime: InferRuntime, inferactors_kit: RuntimeKit
) -> None:
    events = await inferactors_runtime.subscribe(buffer=100)
    handle = await start_chat(inferactors_runtime, inferactors_kit.spec())
    with trio.fail_after(30):
        started = [e async for e in _until_second_start(events)]
    crash = next(e for e in started if isinstance(e, ProcessExited))
    assert crash.exit_code == 3
    pids = [e.pid for e in started if isinstance(e, ProcessStarted)]
    assert len(set(pids)) == 2  # a new process, started by inferactors
    with trio.fail_after(30):
        status = await inferactors_runtime.wait_state(handle, InstanceState.RUNNING)
    assert status.pid == pids[-1]


async def _until_second_start(events: trio.MemoryReceiveChannel[Event]) -> AsyncIterator[Event]:
    seen = 0
    async for event in events:
        yield event
        seen += isinstance(event, ProcessStarted)
        if seen == 2:
            return
