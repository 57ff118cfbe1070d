"""A probe timeout that fired well after its deadline, because our own event loop was
blocked, is "no verdict", not "unreachable" (issue 11). A real loopback server that accepts
and never answers; the loop is blocked by a synchronous sleep in another task.
"""

from __future__ import annotations

import time
from functools import partial

import trio

from inferactors import InferFlavor
from inferactors._edges.probe import ProbeClient
from inferactors._edges.probe_wire import LATE_S
from inferactors._policy.probe_report import Unreachable


async def _silent(stream: trio.SocketStream) -> None:
    async with stream:
        await trio.sleep_forever()


async def _probe(*, block_s: float) -> Unreachable:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        if block_s:

            async def block() -> None:
                await trio.sleep(0.1)
                time.sleep(block_s)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)

            nursery.start_soon(block)
        async with ProbeClient.open(f"http://127.0.0.1:{port}", timeout_s=0.3) as client:
            report = await client.report(InferFlavor.LLAMACPP)
        nursery.cancel_scope.cancel()
    assert isinstance(report.health, Unreachable)
    return report.health


async def test_a_timeout_on_time_is_unreachable() -> None:
    health = await _probe(block_s=0.0)
    assert not health.overloaded
    assert "no complete reply within 0.3 s" in health.why


async def test_a_timeout_fired_late_by_a_blocked_loop_gives_no_verdict() -> None:
    health = await _probe(block_s=0.3 + LATE_S + 0.3)
    assert health.overloaded
    assert "no verdict" in health.why
    assert "overloaded" in health.why
