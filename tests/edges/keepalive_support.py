"""A keep-alive HTTP/1.1 server on loopback (trio + h11) that counts its connections and can
drop a request unanswered, as a server that closed an idle connection does when a request
races the close. Imported as ``edges.keepalive_support``.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import h11
import trio

Drop = Literal["never", "reused", "all"]

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
    client sees when the server closed the idle connection as it sent); ``"all"`` at every
    request. ``requests`` keeps ``(connection number, method, path, answered)``.
    """

    drop: Drop = "never"
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
                request = await _read_request(connection, stream)
                if request is None:
                    return
                method, path = request.method.decode(), request.target.decode()
                dropped = self.drop == "all" or (self.drop == "reused" and count == 2)
                self.requests.append((number, method, path, not dropped))
                if dropped:
                    return  # closed unanswered
                await _answer(connection, stream, BODIES.get(path, b"{}"))
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            await stream.aclose()


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
async def keepalive_server(drop: Drop = "never") -> AsyncIterator[KeepAliveServer]:
    """Serve on a free loopback port until the block ends."""
    server = KeepAliveServer(drop)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
