"""What `FakeFleet` plays for the front door: the memory its fake servers hold
(`FakeMemory`, a memory gauge of a made-up machine) and how they stream completions
(`FakeStream`: a stream that dies midway, one that never ends), all on trio's clock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import attrs
import httpx
import trio

from .._policy.residency import Machine

MiB = 1 << 20


class _Holder(Protocol):
    """A fake child, as the gauge sees it."""

    pid: int

    @property
    def alive(self) -> bool: ...

    def holds(self, now: float) -> int: ...


@attrs.define(eq=False)
class FakeMemory:
    """A machine of ``total`` bytes where other programs hold ``foreign`` bytes and each
    fake child what it holds (its footprint while alive, and after its exit until its
    memory is released); the front door's `MemoryGauge` under MockClock. ``foreign`` may
    be changed by the test at any time."""

    children: Callable[[], Sequence[_Holder]]
    total: int
    foreign: int = 0

    async def machine(self) -> Machine:
        """Total, and available: total less other programs less every child's hold."""
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        held = self.foreign + sum(child.holds(now) for child in self.children())
        return Machine(total=self.total, available=max(0, self.total - held))

    async def tree_rss(self, pid: int) -> int | None:
        """The footprint of the live child ``pid``, None for any other pid."""
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        for child in self.children():
            if child.pid == pid and child.alive:
                return child.holds(now)
        return None


@attrs.frozen
class FakeStream:
    """How a fake server streams a completion (``"stream": true``): ``chunks`` SSE
    chunks of `` word``, one every ``chunk_s`` seconds, then ``data: [DONE]``.

    Attributes:
        chunks: chunks before the end.
        chunk_s: seconds between chunks.
        die_after: the server crashes after this many chunks: the stream is cut with no
            ``[DONE]`` (the client's read fails as on a real dead peer).
        endless: chunks never stop (until the client leaves).
    """

    chunks: int = 4
    chunk_s: float = 0.0
    die_after: int | None = None
    endless: bool = False


class _Crashable(Protocol):
    def crash(
        self, *, exit_code: int | None = 1, signal: int | None = None, stderr: bytes = b""
    ) -> None: ...


def streaming(request: httpx.Request) -> bool:
    """Whether ``request``'s JSON body asks for a stream."""
    try:
        body = json.loads(request.content or b"{}")
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def stream_response(child: _Crashable, stream: FakeStream) -> httpx.Response:
    """An SSE response that plays ``stream`` (the child crashes when it dies midway)."""
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=_chunks(child, stream),
    )


async def _chunks(child: _Crashable, stream: FakeStream) -> AsyncIterator[bytes]:
    sent = 0
    while stream.endless or sent < stream.chunks:
        if stream.die_after is not None and sent >= stream.die_after:
            child.crash(exit_code=None, signal=9, stderr=b"fake: died mid-stream\n")
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        await trio.sleep(stream.chunk_s)
        chunk = {"choices": [{"index": 0, "delta": {"content": " word"}}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        sent += 1
    yield b"data: [DONE]\n\n"
