"""Shared arrange code for the tests of the HTTP probe: `Fake`, a server with fixed routes
(404 elsewhere, as mlx_lm.server answers) that records every request; routes that reply,
fail or hang; and a closed loopback port.

A `Fake` answers either wire of `ProbeClient` (the `wire` fixture runs a test with both):
``httpx`` through ``httpx.MockTransport``; ``h11`` (the lean wire the supervisor probes
with) through in-memory streams, each served by an h11 server task that turns the request
into an ``httpx.Request``, asks the same route, and writes its ``httpx.Response`` back (a
body streamed by the route is pulled one chunk at a time, each only once the client reads
again, so a reader that stops early stops the route too). A route that raises stands for a
transport failure: on httpx the transport raises it; on the lean wire the connection
breaks and the client's next read raises an `OSError` with the same words. Both run under
trio's ``MockClock``.

Imported as ``edges.probe_support``; the sample server replies these tests serve are in
``policy.probe_replies_support``, shared with the pure parsing tests.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Literal

import attrs
import h11
import httpx
import trio
import trio.testing

from inferactors._edges.probe import ProbeClient

Route = Callable[[httpx.Request], Awaitable[httpx.Response]]
WireName = Literal["httpx", "h11"]
WIRES: tuple[WireName, ...] = ("httpx", "h11")
BASE_URL = "http://127.0.0.1:8090"


@attrs.define
class _Current:
    wire: WireName = "httpx"


CURRENT = _Current()
"""The wire `Fake.client` opens; the ``wire`` fixture (``edges/conftest.py``) sets it."""


def reply(status: int, body: object = None, headers: dict[str, str] | None = None) -> Route:
    """A route answering ``status`` with ``body`` (bytes as is, anything else as JSON)."""

    async def route(request: httpx.Request) -> httpx.Response:
        if body is None or isinstance(body, bytes):
            return httpx.Response(status, content=body or b"", headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return route


def fail(exc: Exception) -> Route:
    """A route whose transport raises ``exc``."""

    async def route(request: httpx.Request) -> httpx.Response:
        raise exc

    return route


async def hang(request: httpx.Request) -> httpx.Response:
    """A route that never answers."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@attrs.define
class Fake:
    """A server with fixed routes by path, 404 elsewhere, every request kept."""

    routes: dict[str, Route]
    requests: list[httpx.Request] = attrs.Factory(list)
    connections: int = 0

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get(request.url.path)
        return httpx.Response(404) if route is None else await route(request)

    def client(self, timeout_s: float = 2.0, *, wire: WireName | None = None) -> ProbeClient:
        """A `ProbeClient` on ``wire`` (default: the ``wire`` fixture's)."""
        if (wire or CURRENT.wire) == "httpx":
            transport = httpx.MockTransport(self.handle)
            return ProbeClient.open(BASE_URL, timeout_s=timeout_s, transport=transport)
        return ProbeClient.open(BASE_URL, timeout_s=timeout_s, connect=self.connect)

    async def connect(self) -> trio.abc.Stream:
        """A new in-memory connection, served by its own h11 server task."""
        self.connections += 1
        ours, theirs = trio.testing.lockstep_stream_pair()
        client = _Breakable(ours)
        trio.lowlevel.spawn_system_task(self._serve, theirs, client)
        await trio.lowlevel.checkpoint()
        return client

    async def _serve(self, stream: trio.abc.Stream, client: _Breakable) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while (request := await _read_request(connection, stream)) is not None:
                try:
                    response = await self.handle(request)
                except httpx.TransportError as error:
                    client.broken = str(error)
                    return
                await _write_response(connection, stream, response)
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client went away
        finally:
            await trio.aclose_forcefully(stream)


@attrs.define(eq=False)
class _Breakable(trio.abc.Stream):
    """The client's end of an in-memory connection; once the server ``broken`` it (a route
    that raised), reads and writes raise an `OSError` in the route's words."""

    inner: trio.abc.Stream
    broken: str | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._check()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if not data:
            self._check()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _check(self) -> None:
        if self.broken is not None:
            raise OSError(self.broken)


async def _read_request(
    connection: h11.Connection, stream: trio.abc.Stream
) -> httpx.Request | None:
    head: h11.Request | None = None
    body = b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(bytes(await stream.receive_some(64 * 1024)))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            headers = [(name.decode(), value.decode()) for name, value in head.headers]
            url = BASE_URL + head.target.decode()
            return httpx.Request(head.method.decode(), url, headers=headers, content=body)
        else:  # ConnectionClosed, or PAUSED after a close
            return None


async def _write_response(
    connection: h11.Connection, stream: trio.abc.Stream, response: httpx.Response
) -> None:
    headers = [(name, value) for name, value in response.headers.raw]
    head = h11.Response(status_code=response.status_code, headers=headers)
    await stream.send_all(connection.send(head) or b"")
    if response.is_stream_consumed:  # built from bytes: read at construction
        await stream.send_all(connection.send(h11.Data(data=response.content)) or b"")
    else:
        chunks = response.aiter_raw().__aiter__()
        while True:
            await stream.wait_send_all_might_not_block()  # pull only what the client reads
            await stream.send_all(b"")  # raises once the client has hung up
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            await stream.send_all(connection.send(h11.Data(data=chunk)) or b"")
    await stream.send_all(connection.send(h11.EndOfMessage()) or b"")


def closed_port() -> int:
    """A loopback port with nothing listening (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
