"""A keep-alive HTTP/1.1 server on loopback (trio + h11) that counts its connections and
misbehaves the ways servers do with kept connections: drops a request unanswered (as a
server that closed an idle connection just as the request came), resets the connection,
closes it after N answers or after it sat idle, or answers slowly. Imported as
``edges.keepalive_support``.
"""

from __future__ import annotations

import functools
import itertools
import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import h11
import trio

Drop = Literal["never", "reused", "all", "reset-reused"]

HEALTH = json.dumps({"status": "ok"}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "tiny.gguf"}]}).encode()
COMPLETION = json.dumps(
    {"choices": [{"message": {"content": " and"}, "finish_reason": "length"}]}
).encode()
BODIES = {"/health": HEALTH, "/v1/models": MODELS, "/v1/chat/completions": COMPLETION}


@attrs.define(eq=False)
class KeepAliveServer:
    """Answers `BODIES` on every connection until the client closes it.

    ``drop``: ``"reused"`` closes a connection, unanswered, at its second request (what a
    client sees when the server closed the idle connection as it sent); ``"reset-reused"``
    resets it (RST) there instead; ``"all"`` closes it unanswered at every request.
    ``close_after``: after that many answers on a connection, close it without a word.
    ``idle_close_s``: close a connection that waited that long (float seconds) for its next
    request. ``delay_s``: wait that long before each answer.
    ``requests`` keeps ``(connection number, method, path, answered)``.
    """

    drop: Drop = "never"
    close_after: int | None = None
    idle_close_s: float | None = None
    delay_s: float = 0.0
    port: int = 0
    connections: int = 0
    requests: list[tuple[int, str, str, bool]] = attrs.Factory(list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        connection = h11.Connection(h11.SERVER)
        try:
            for count in itertools.count(1):
                request = await self._next_request(connection, stream)
                if request is None:
                    return
                method, path = request.method.decode(), request.target.decode()
                dropped = self.drop == "all" or (self.drop != "never" and count == 2)
                self.requests.append((number, method, path, not dropped))
                if dropped:
                    if self.drop == "reset-reused":
                        _reset(stream)
                    return  # closed unanswered
                await trio.sleep(self.delay_s)
                await _answer(connection, stream, BODIES.get(path, b"{}"))
                if count == self.close_after:
                    return
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            await stream.aclose()

    async def _next_request(
        self, connection: h11.Connection, stream: trio.SocketStream
    ) -> h11.Request | None:
        if self.idle_close_s is None:
            return await _read_request(connection, stream)
        with trio.move_on_after(self.idle_close_s):
            return await _read_request(connection, stream)
        return None  # idle too long: closed


def _reset(stream: trio.SocketStream) -> None:
    """Make the close a reset: linger on, with a zero timeout."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def _answer(connection: h11.Connection, stream: trio.SocketStream, body: bytes) -> None:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    response = h11.Response(status_code=200, headers=headers)
    await stream.send_all(connection.send(response) or b"")
    await stream.send_all(connection.send(h11.Data(data=body)) or b"")
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
        elif isinstance(event, h11.ConnectionClosed):
            return None


@asynccontextmanager
async def keepalive_server(
    drop: Drop = "never",
    *,
    close_after: int | None = None,
    idle_close_s: float | None = None,
    delay_s: float = 0.0,
) -> AsyncIterator[KeepAliveServer]:
    """Serve on a free loopback port until the block ends (see `KeepAliveServer`)."""
    server = KeepAliveServer(drop, close_after, idle_close_s, delay_s)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
