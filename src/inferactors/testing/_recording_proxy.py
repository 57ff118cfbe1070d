"""A recording HTTP proxy for tests: forwards every request to an upstream server and
remembers its method and target, so a test can prove what a server received (for example
that an adopted server only ever got GET requests).

HTTP/1.1 framing is h11's; forwarding is httpx's. Loopback only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import h11
import httpx
import trio

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "upgrade"}
)


@attrs.frozen
class RecordedRequest:
    """One request the proxy forwarded: method (``"GET"``), target (``"/health"``), body."""

    method: str
    target: str
    body: bytes


@attrs.define(eq=False)
class RecordingProxy:
    """A running proxy; ``port`` is where it listens on 127.0.0.1."""

    upstream: str
    port: int = 0
    requests: list[RecordedRequest] = attrs.Factory(list)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def methods(self) -> set[str]:
        """Every method seen so far."""
        return {request.method for request in self.requests}


@asynccontextmanager
async def open_recording_proxy(upstream: str) -> AsyncIterator[RecordingProxy]:
    """Run a proxy to ``upstream`` (a base URL) on a free loopback port for the block."""
    proxy = RecordingProxy(upstream.rstrip("/"))
    async with (
        httpx.AsyncClient(trust_env=False, timeout=30.0) as client,
        trio.open_nursery() as nursery,
    ):
        listeners = await nursery.start(
            trio.serve_tcp, lambda stream: _serve_connection(proxy, client, stream), 0
        )
        proxy.port = listeners[0].socket.getsockname()[1]
        yield proxy
        nursery.cancel_scope.cancel()


async def _serve_connection(
    proxy: RecordingProxy, client: httpx.AsyncClient, stream: trio.SocketStream
) -> None:
    connection = h11.Connection(h11.SERVER)
    async with stream:
        try:
            await _exchange_all(proxy, client, connection, stream)
        except (h11.ProtocolError, trio.BrokenResourceError, httpx.TransportError):
            return  # the client or the upstream went away: drop the connection


async def _exchange_all(
    proxy: RecordingProxy,
    client: httpx.AsyncClient,
    connection: h11.Connection,
    stream: trio.SocketStream,
) -> None:
    while True:
        event = await _next_event(connection, stream)
        if not isinstance(event, h11.Request):
            return
        body = await _read_body(connection, stream)
        recorded = RecordedRequest(event.method.decode(), event.target.decode(), body)
        proxy.requests.append(recorded)
        await _forward(proxy, client, connection, stream, event, recorded)
        if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            return
        connection.start_next_cycle()


async def _forward(
    proxy: RecordingProxy,
    client: httpx.AsyncClient,
    connection: h11.Connection,
    stream: trio.SocketStream,
    request: h11.Request,
    recorded: RecordedRequest,
) -> None:
    headers = [
        (name.decode(), value.decode())
        for name, value in request.headers
        if name.decode().lower() not in _HOP_BY_HOP
    ]
    reply = await client.request(
        recorded.method, proxy.upstream + recorded.target, headers=headers, content=recorded.body
    )
    out_headers = [
        (name, value) for name, value in reply.headers.items() if name.lower() not in _HOP_BY_HOP
    ]
    out_headers.append(("content-length", str(len(reply.content))))
    for event in (
        h11.Response(status_code=reply.status_code, headers=out_headers),
        h11.Data(data=reply.content),
        h11.EndOfMessage(),
    ):
        await stream.send_all(connection.send(event) or b"")


async def _read_body(connection: h11.Connection, stream: trio.SocketStream) -> bytes:
    chunks: list[bytes] = []
    while True:
        event = await _next_event(connection, stream)
        if isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        else:
            return b"".join(chunks)


async def _next_event(connection: h11.Connection, stream: trio.SocketStream) -> object:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        connection.receive_data(await stream.receive_some(65536))
