"""One connection of the lean probe wire (``probe_h11``) and one request and reply on it.

`Connection` is a connection to the server: its stream, h11's state of it and, on a trio
socket, the lean path (one ``write`` per request, ``TCP_QUICKACK`` before each read, one
``read`` once readable). `exchange_on` frames one request and its reply with h11 and bounds
the reply: a ``Content-Encoding`` other than identity is refused before its body is read, a
declared length over 1 MiB fails before reading, and a body is read only until it passes
1 MiB. A reused connection that ends before a byte of a reply raises `Stale`, which the
wire's stale-connection rule sends once more. When to keep, reuse or open a connection, and
the deadlines, are `probe_h11.H11Wire`'s. Split from ``probe_h11``.
"""

from __future__ import annotations

import contextlib
import os
import socket

import attrs
import h11
import trio

from .probe_wire import KEEPALIVE_EXPIRY_S, MAX_BODY_BYTES, ProbeFailure

RECEIVE_BYTES = 64 * 1024
"""How much one read asks of the socket."""

UNLOOKED_IDLE_S = 0.05
"""A kept connection idle for less than this (float seconds) is reused without first
checking that the server has not closed it (one ``poll`` per request saved: a probe's
second GET follows its first at once)."""

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only

_write = os.write
"""Writes to a socket's descriptor (tests spy on it)."""

_read = os.read
"""Reads from a socket's descriptor (tests spy on it)."""


class Stale(Exception):
    """A reused connection ended before a byte of a reply (the keep-alive race)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@attrs.define(eq=False)
class Connection:
    """One connection to the server: its stream, h11's state of it, and, on a trio socket,
    the socket and its descriptor for the lean path (`send`, `receive`)."""

    stream: trio.abc.Stream
    h11: h11.Connection = attrs.Factory(lambda: h11.Connection(h11.CLIENT))
    idle_since: float = 0.0
    reused: bool = False
    sock: trio.socket.SocketType | None = None
    fd: int = -1
    """The socket's descriptor (-1: not a socket, the stream's own methods are used)."""

    @classmethod
    def of(cls, stream: trio.abc.Stream) -> Connection:
        """A new connection on ``stream``; a `trio.SocketStream` takes the lean path."""
        if isinstance(stream, trio.SocketStream):
            return cls(stream, sock=stream.socket, fd=stream.socket.fileno())
        return cls(stream)

    async def send(self, payload: bytes) -> None:
        """Send all of ``payload``. On a socket, straight ``write`` calls on its non-blocking
        descriptor, waiting only while the kernel's buffer is full: a probe's request
        leaves in one call with no pass through the scheduler (the read that follows is
        the checkpoint). trio's stream takes one pass and a failed attempt per call."""
        if self.fd < 0:
            await self.stream.send_all(payload)
            return
        view = memoryview(payload)
        while view:
            try:
                view = view[_write(self.fd, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.fd)

    async def receive(self) -> bytes:
        """One read (``b""``: the server closed); on a socket, our ACK of what it brings
        goes out at once (``TCP_QUICKACK``, which the kernel clears again, so it is set
        before each read): a server that writes a reply's head and body apart with Nagle on
        (Python's ``http.server``) would otherwise hold the body until our delayed ACK, 40
        ms later. On a socket, the read waits for the descriptor to be readable first (a
        reply is never there the moment its request left) and reads it with one ``read``."""
        if _QUICKACK is not None and self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        if self.fd < 0:
            return bytes(await self.stream.receive_some(RECEIVE_BYTES))
        while True:
            await trio.lowlevel.wait_readable(self.fd)
            try:
                return _read(self.fd, RECEIVE_BYTES)
            except BlockingIOError:
                continue

    def fresh_for_reuse(self, now: float) -> bool:
        """Whether it may carry another request: idle under the expiry, and the server has
        not closed it (a kept socket is readable while idle only when it has). One idle for
        under `UNLOOKED_IDLE_S` (a probe's second GET) is taken without that look: a close
        in so short a window is the keep-alive race the stale-connection rule covers."""
        idle_s = now - self.idle_since
        if idle_s >= KEEPALIVE_EXPIRY_S:
            return False
        if idle_s < UNLOOKED_IDLE_S:
            return True
        return self.sock is None or not self.sock.is_readable()


async def exchange_on(conn: Connection, event: h11.Request, body: bytes) -> tuple[int, bytes, bool]:
    """One request on ``conn``: ``(status, body, keep)``; ``keep``: the server lets the
    connection carry another request.

    Raises:
        Stale: a reused connection failed before a byte of a reply.
        ProbeFailure: the reply is encoded or over the cap.
        OSError, trio.BrokenResourceError, h11.ProtocolError: transport failures.
    """
    wire = conn.h11
    payload = wire.send(event) or b""
    if body:
        payload += wire.send(h11.Data(data=body)) or b""
    payload += wire.send(h11.EndOfMessage()) or b""
    got_bytes = False
    try:
        await conn.send(payload)  # ONE write: no Nagle / delayed-ACK stall
        status, got_bytes = await _head(conn, event)
        data = await _body(conn, event)
    except (OSError, trio.BrokenResourceError, h11.RemoteProtocolError) as exc:
        if conn.reused and not got_bytes:
            raise Stale(exc) from exc
        raise
    keep = wire.our_state is h11.DONE and wire.their_state is h11.DONE
    return status, data, keep


def _named(request: h11.Request) -> str:
    """``"GET /health"``: how a failure names its request (made only when one fails)."""
    return f"{request.method.decode()} {request.target.decode()}"


async def _head(conn: Connection, request: h11.Request) -> tuple[int, bool]:
    """The reply's status once its head is in, refused when encoded or declared too large."""
    wire = conn.h11
    got_bytes = False
    while True:
        event = wire.next_event()
        if event is h11.NEED_DATA:
            chunk = await conn.receive()
            if not chunk and not got_bytes:
                raise h11.RemoteProtocolError("Server disconnected without sending a response.")
            got_bytes = got_bytes or bool(chunk)
            wire.receive_data(chunk)
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            _check_head(event, request)
            return event.status_code, True
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} before a reply")


async def _body(conn: Connection, request: h11.Request) -> bytes:
    wire = conn.h11
    chunks: list[bytes] = []
    size = 0
    while True:
        event = wire.next_event()
        if event is h11.NEED_DATA:
            wire.receive_data(await conn.receive())
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_BODY_BYTES:
                raise _too_large(request)
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(chunks)
        else:
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} in a reply body")


def _check_head(response: h11.Response, request: h11.Request) -> None:
    encoding = b""
    declared = b""
    for name, value in response.headers:
        if name == b"content-encoding":
            encoding = value.strip().lower()
        elif name == b"content-length":
            declared = value.strip()
    if encoding not in (b"", b"identity"):
        shown = encoding.decode("latin-1")[:40]
        why = f"{_named(request)}: reply is {shown}-encoded; we asked for identity (refused unread)"
        raise ProbeFailure(why, kind="encoded")
    if declared.isdigit() and (len(declared) > 9 or int(declared) > MAX_BODY_BYTES):
        raise _too_large(request)


def _too_large(request: h11.Request) -> ProbeFailure:
    return ProbeFailure(f"{_named(request)}: response too large (over 1 MiB)", kind="too-large")
