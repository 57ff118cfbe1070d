"""Serving an ASGI app with hypercorn's trio connection handler, with a deadline on every
write.

hypercorn's own worker (``hypercorn.trio.run.worker_serve``) writes each piece of a reply
inside a shielded cancel scope and with no deadline: one client that stops reading (a
``logs -f`` piped into a paused pager, a socket nobody reads) blocks that write forever,
so its connection never ends, and neither does the worker nor the supervisor that waits
for it at shutdown (cancellation cannot reach a shielded write). `serve_asgi` runs the
same connection handler (``hypercorn.trio.tcp_server.TCPServer``, HTTP/1.1 and h2) over a
stream whose every write has a deadline of its own (a scope inside the shield still ends
by its own deadline):

- while serving, a write that cannot go through within ``WriteDeadlines.write_s`` (60 s:
  the convention of nginx's ``send_timeout``) cuts the connection: the client is not
  reading;
- once ``ended`` returns, new connections are refused, idle ones close, and the requests
  under way get ``grace_s`` to finish (a follow stream ends cleanly with what it had
  queued); a write still blocked then is cut, and so is every later one;
- `WriteDeadlines.cut_now` cuts every write at once (a second SIGTERM during shutdown).

A cut connection is closed: its client sees its reply end early (a chunked body without
its last chunk), never a complete one.

``TCPServer``, ``WorkerContext`` and ``ConnectionState`` are hypercorn's internals, not its
public API: ``pyproject.toml`` pins hypercorn's minor version (``0.18.*``) for that reason;
a new minor version is taken only after this module is checked against it.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import repr_socket_addr

WRITE_S = 60.0
"""How long one write to a client may wait for the client to read, float seconds."""


@attrs.define(eq=False)
class WriteDeadlines:
    """The deadline of every write to the clients of one or more servers: `WRITE_S` from
    its start, and never beyond the time set by `cut_after` (none until then)."""

    write_s: float = WRITE_S
    _cut_at: float = math.inf
    _open: set[trio.CancelScope] = attrs.Factory(set)

    @property
    def cutting(self) -> bool:
        """Whether a cut time was set (the servers are ending)."""
        return self._cut_at < math.inf

    def cut_after(self, seconds: float) -> None:
        """Cut every write, under way or to come, that is not done ``seconds`` from now
        (an earlier cut time stays)."""
        self._cut_at = min(self._cut_at, trio.current_time() + seconds)
        for scope in self._open:
            scope.deadline = min(scope.deadline, self._cut_at)

    def cut_now(self) -> None:
        """Cut every write now (`cut_after` 0)."""
        self.cut_after(0.0)

    @contextmanager
    def one_write(self) -> Iterator[trio.CancelScope]:
        """The cancel scope of one write: cancelled at its deadline."""
        deadline = min(trio.current_time() + self.write_s, self._cut_at)
        with trio.CancelScope(deadline=deadline) as scope:
            self._open.add(scope)
            try:
                yield scope
            finally:
                self._open.discard(scope)


class DeadlinedStream:
    """A client connection whose writes have deadlines (`WriteDeadlines`): a write that
    misses it raises `trio.BrokenResourceError` and closes the socket (a read waiting on
    it ends too), and every later write fails at once.

    It has what hypercorn's `TCPServer` uses of a plain (not TLS) trio stream:
    ``socket``, ``receive_some``, ``send_all``, ``send_eof``, ``aclose``.
    """

    def __init__(self, stream: trio.SocketStream, deadlines: WriteDeadlines) -> None:
        self._stream = stream
        self._deadlines = deadlines
        self.cut = False

    @property
    def socket(self) -> trio.socket.SocketType:
        """The connection's socket (hypercorn reads its addresses)."""
        return self._stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """Bytes from the client; ``b""`` at its end."""
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` by its deadline.

        Raises:
            trio.BrokenResourceError: the deadline passed (the client did not read), or
                the connection was cut before.
        """
        if self.cut:
            raise trio.BrokenResourceError("the connection was cut")
        with self._deadlines.one_write() as scope:
            await self._stream.send_all(data)
        if scope.cancelled_caught:
            self.cut = True
            self._stream.socket.close()  # a task waiting to read wakes up (closed)
            raise trio.BrokenResourceError("the client did not read in time")

    async def send_eof(self) -> None:
        """End the sending side (a cut connection: `trio.ClosedResourceError`)."""
        if self.cut:
            raise trio.ClosedResourceError("the connection was cut")
        await self._stream.send_eof()

    async def aclose(self) -> None:
        """Close the connection."""
        await self._stream.aclose()


async def serve_asgi(
    app: AppWrapper,
    config: Config,
    listeners: list[socket.socket],
    ended: Callable[[], Awaitable[None]],
    *,
    hurry: Callable[[], Awaitable[None]] | None = None,
    write_s: float = WRITE_S,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``listeners`` (bound and listening) until ``ended`` returns, then
    give the requests under way ``config.graceful_timeout`` seconds and cut what is left
    (module docstring). The listeners are not closed here.

    Args:
        app: The wrapped ASGI app (``hypercorn.utils.wrap_app``).
        config: hypercorn's settings (timeouts, logs); ``graceful_timeout`` is the grace,
            float seconds.
        listeners: The listening sockets.
        ended: When it returns, the server ends.
        hurry: When it returns (before or after ``ended``), every connection is cut at
            once: no grace.
        write_s: The deadline of one write while serving, float seconds.
        task_status: Started with the bound addresses (``"http://..."``).

    Cancellation cuts every connection at once.
    """
    context = WorkerContext(None)
    state: LifespanState = {}
    deadlines = WriteDeadlines(write_s)

    async def connection(stream: trio.SocketStream) -> None:
        bounded = DeadlinedStream(stream, deadlines)
        server = TCPServer(app, config, context, ConnectionState(state.copy()), bounded)  # type: ignore[arg-type]
        await server.run()

    accepting = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in listeners]
    bound = [f"http://{repr_socket_addr(s.family, s.getsockname())}" for s in listeners]
    async with trio.open_nursery() as guarding:
        async with trio.open_nursery() as connections:
            guarding.start_soon(_guard, hurry, deadlines, connections.cancel_scope)
            async with trio.open_nursery() as accept:
                serving = partial(trio.serve_listeners, handler_nursery=connections)
                accept.start_soon(serving, connection, accepting)
                task_status.started(bound)
                await ended()
                accept.cancel_scope.cancel()
            await context.terminated.set()  # idle keep-alive connections close
            grace = float(config.graceful_timeout)
            deadlines.cut_after(grace)
            connections.cancel_scope.deadline = min(
                connections.cancel_scope.deadline, trio.current_time() + grace
            )
        guarding.cancel_scope.cancel()


async def _guard(
    hurry: Callable[[], Awaitable[None]] | None,
    deadlines: WriteDeadlines,
    connections: trio.CancelScope,
) -> None:
    """Cut every write, and the connections, once ``hurry`` returns; cut every write when
    cancelled (a write blocked inside hypercorn's shield hears no cancellation)."""
    try:
        await (hurry or trio.sleep_forever)()
        connections.cancel()
    finally:
        deadlines.cut_now()
