"""A server on a real loopback socket (HTTP framed by h11) that plays, request by request,
the ways a connection can end without an answer, so httpcore meets them on the wire and
says them in its own words.

`open_closing_server(plays)` serves until the block ends; each request that arrives takes
the next play (then ``"answer"`` for ever):

- ``"answer"``: read it, answer 200 ``ok:<body>`` and keep the connection;
- ``"answer-then-close"``: answer it, then close the connection while idle (as
  llama-server does after 5 s idle); `ClosingServer.idle_closed` is set once closed;
- ``"read-then-close"``: read the whole request, then close without a byte of answer (a
  server that crashed or restarted mid-prompt);
- ``"close-unread"``: close as the request arrives, without reading it (the kernel resets
  the connection: the server's idle close crossed the request);
- ``"fin-unread"``: shut the sending side as the request arrives, unread (the client
  reads an end of stream), then close;
- ``"garbage"``: read it, answer with a head h11 refuses, then close;
- ``"head-then-close"``: read it, send a 200 head that promises more body than it sends,
  then close (a server that died halfway through its answer).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import h11
import trio

PLAYS = frozenset(
    {"answer", "answer-then-close", "read-then-close", "close-unread", "fin-unread", "garbage",
     "head-then-close"}
)  # fmt: skip


@attrs.define
class ClosingServer:
    """What the server saw: ``connections`` accepted, and each request it read as
    (connection number from 1, method, body)."""

    plays: list[str]
    port: int = 0
    connections: int = 0
    read: list[tuple[int, str, bytes]] = attrs.Factory(list)
    idle_closed: trio.Event = attrs.Factory(trio.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        connection = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                if not await stream.socket.recv(1, socket.MSG_PEEK):
                    return  # the client closed it
                play = self.plays.pop(0) if self.plays else "answer"
                if play == "close-unread":
                    return
                if play == "fin-unread":
                    stream.socket.shutdown(socket.SHUT_WR)
                    await trio.sleep(0.2)
                    return
                method, body = await _read_request(connection, stream)
                self.read.append((number, method, body))
                if play == "read-then-close":
                    return
                if play == "garbage":
                    await stream.send_all(b"HTTP/1.1 two hundred\r\n\r\n")
                    return
                if play == "head-then-close":
                    await _half_answer(connection, stream)
                    return
                await _answer(connection, stream, b"ok:" + body)
                if play == "answer-then-close":
                    await stream.aclose()
                    self.idle_closed.set()
                    return
                connection.start_next_cycle()


async def _read_request(connection: h11.Connection, stream: trio.SocketStream) -> tuple[str, bytes]:
    method, body = "", b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            method = event.method.decode()
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return method, body


async def _answer(connection: h11.Connection, stream: trio.SocketStream, body: bytes) -> None:
    headers = [("content-type", "text/plain"), ("content-length", str(len(body)))]
    for event in (h11.Response(status_code=200, headers=headers), h11.Data(data=body)):
        await stream.send_all(connection.send(event) or b"")
    await stream.send_all(connection.send(h11.EndOfMessage()) or b"")


async def _half_answer(connection: h11.Connection, stream: trio.SocketStream) -> None:
    headers = [("content-type", "application/json"), ("content-length", "100")]
    head = h11.Response(status_code=200, headers=headers)
    for event in (head, h11.Data(data=b'{"choices": [')):
        await stream.send_all(connection.send(event) or b"")


@asynccontextmanager
async def open_closing_server(plays: list[str]) -> AsyncIterator[ClosingServer]:
    """Serve `ClosingServer` on a free 127.0.0.1 port for the block."""
    unknown = set(plays) - PLAYS
    if unknown:
        raise ValueError(f"unknown plays {sorted(unknown)}")
    server = ClosingServer(list(plays))
    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()
