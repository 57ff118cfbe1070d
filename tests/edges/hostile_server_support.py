"""A real loopback HTTP server that answers the way hostile servers do, for the edge tests.

`hostile_server` serves fixed `Reply` s by path (404 elsewhere) over trio sockets, with h11
parsing the requests: a reply may carry any headers (``Content-Encoding: gzip`` on a body
that really is a gzip bomb) and may trickle its body, ``chunk`` bytes every ``pause_s``.
The fake server program (``inferactors.testing``) cannot do either. `bomb` makes the
compressed bodies: 64 MiB of zeros in 64 KiB (gzip, deflate) down to a few hundred bytes
(br). `peak_allocated` measures the most memory Python held during a call (tracemalloc).

Imported as ``edges.hostile_server_support``.
"""

from __future__ import annotations

import functools
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import brotli  # type: ignore[import-untyped]  # brotli ships no type hints
import h11
import trio
import zstandard

T = TypeVar("T")

MiB = 1024 * 1024
BOMB_MIB = 64
"""How much a `bomb` inflates to: 64 MiB, 64 times the probe's 1 MiB body cap."""


@attrs.frozen
class Reply:
    """One canned answer: status, extra headers, body; the body goes out ``chunk`` bytes at a
    time, each after a pause of ``pause_s`` float seconds. A Content-Length is added unless
    ``headers`` set one."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunk: int = 64 * 1024
    pause_s: float = 0.0


@attrs.define
class HostileServer:
    """The running server: its ``port``, the request headers it received (``seen``, one dict
    per request, names lower-case), its requests as ``"METHOD PATH"`` (``requests``) and how
    many body bytes it got onto the wire per path. ``replies`` may be replaced while it runs."""

    replies: dict[str, Reply]
    port: int = 0
    seen: list[dict[str, str]] = attrs.Factory(list)
    requests: list[str] = attrs.Factory(list)
    sent: dict[str, int] = attrs.Factory(dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            request = await _read_request(connection, stream)
            if request is None:
                return
            path = request.target.decode("ascii", "replace").split("?")[0]
            self.seen.append({k.decode().lower(): v.decode() for k, v in request.headers})
            self.requests.append(f"{request.method.decode()} {path}")
            await self._answer(connection, stream, path)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client hung up (it refused the reply, or its deadline passed)
        finally:
            await stream.aclose()

    async def _answer(
        self, connection: h11.Connection, stream: trio.SocketStream, path: str
    ) -> None:
        reply = self.replies.get(path, Reply(404, body=b'{"error": "not found"}'))
        headers = list(reply.headers)
        if not any(name.lower() == "content-length" for name, _ in headers):
            headers.append(("Content-Length", str(len(reply.body))))
        response = h11.Response(status_code=reply.status, headers=headers)
        await stream.send_all(connection.send(response) or b"")
        for start in range(0, len(reply.body), reply.chunk):
            await trio.sleep(reply.pause_s)
            piece = reply.body[start : start + reply.chunk]
            await stream.send_all(connection.send(h11.Data(data=piece)) or b"")
            self.sent[path] = self.sent.get(path, 0) + len(piece)
        await stream.send_all(connection.send(h11.EndOfMessage()) or b"")


async def _read_request(
    connection: h11.Connection, stream: trio.SocketStream
) -> h11.Request | None:
    request: h11.Request | None = None
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(64 * 1024)
            if not data:
                return None
            connection.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request


@asynccontextmanager
async def hostile_server(replies: dict[str, Reply]) -> AsyncIterator[HostileServer]:
    """Serve ``replies`` on a free loopback port until the block ends."""
    server = HostileServer(replies)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


@functools.cache
def bomb(encoding: str) -> bytes:
    """`BOMB_MIB` MiB of zeros compressed as ``encoding`` (gzip, deflate, br or zstd)."""
    zeros = bytes(MiB)
    if encoding in ("gzip", "deflate"):
        gzip = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
        return b"".join(gzip.compress(zeros) for _ in range(BOMB_MIB)) + gzip.flush()
    if encoding == "br":
        compressor = brotli.Compressor(quality=5)
        body: bytes = b"".join(compressor.process(zeros) for _ in range(BOMB_MIB))
        tail: bytes = compressor.finish()
        return body + tail
    assert encoding == "zstd", encoding
    zstd = zstandard.ZstdCompressor().compressobj()
    compressed: bytes = b"".join(zstd.compress(zeros) for _ in range(BOMB_MIB)) + zstd.flush()
    return compressed


def nesting_bomb(depth: int = 100_000) -> bytes:
    """``[[[...]]]`` nested ``depth`` deep: the json module would need ``depth`` frames."""
    return b"[" * depth + b"]" * depth


async def peak_allocated(call: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """``await call()`` with tracemalloc on: its result and the peak bytes Python held
    meanwhile, above what it held before."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = await call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - before
