"""The lean probe wire: HTTP/1.1 on a trio stream, framed by h11, one kept-alive connection.

The supervisor's own probes (``/health``, ``/v1/models``, Ollama's lists, the one-token
completion) go through `H11Wire` instead of httpx (the front door and the CLI keep
httpx). The framing is h11's, the same state machine httpx uses underneath; what is left
out is httpx's machinery per request (its models, pool, transports, traces), most of the
cost of a probe: on this machine a probe through httpx took 1.64 ms of CPU, through h11 on a
trio stream 0.43 ms (``bench/bench_adopted.py`` measures both).

- **One kept-alive connection** per wire (so per server) for its GETs, kept at most
  `probe_wire.KEEPALIVE_EXPIRY_S` idle (under cpp-httplib's 5 s; llama-server parks a
  worker thread on each idle connection, see ``probe_wire``), dropped at once when the server
  closed it (readable while idle) or answered ``Connection: close`` or HTTP/1.0. A POST goes
  on a connection of its own, closed afterwards, never sent twice.
- **The stale-connection rule**: a GET that meets a kept connection the server closed (the
  send fails, or the connection ends before a byte of a reply) is sent once more, on a
  fresh connection, within the same deadline. A GET on a fresh connection, and a POST, are
  never sent twice.
- **Pre-built requests**: each GET's h11 event (its headers validated once) is built at its
  first use and kept; every request leaves in ONE write on a socket with ``TCP_NODELAY``
  (trio sets it), so neither Nagle nor a delayed ACK can hold half a request; and each read
  asks for a quick ACK (``TCP_QUICKACK``), so a server that writes a reply's head and body
  apart with Nagle on (Python's ``http.server``, what mlx_lm.server runs on) is not held
  40 ms by our delayed ACK: two GETs on a kept connection to an ``http.server`` fake took
  44 to 59 ms without it, 1.5 to 8 ms with it.
- **Bounds**: ``Accept-Encoding: identity`` on every request; a reply in any other
  ``Content-Encoding`` is refused before its body is read (we never decode, so a
  compression bomb allocates nothing); a declared length over 1 MiB fails before reading,
  and a body is read only until it passes 1 MiB; h11 caps a reply's head at 16 KiB.
- **Paced reconnection**: every new connection of a trio run takes a token from one
  `ConnectPacer` (`RECONNECTS_PER_S`, burst `RECONNECT_BURST`), so after a stall, when every
  kept connection has expired together, the probes reconnect spread out rather than as a
  storm. Time spent waiting for a token is ours: the request's deadline moves by as much,
  so a refused connect after the wait is a verdict at once and a server that answers has
  its whole budget.
- **Our lateness is no verdict** (``_policy/lateness.py``): a timeout whose budget our own
  loop (or our pacer) ate is ``ProbeFailure`` kind ``"overloaded"``, not ``"timeout"``;
  but a request given a deadline past its ``timeout_s`` (a stretched probe) whose time
  run minus our lateness still reaches ``timeout_s`` is a timeout (`judges_timeout`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Mapping

import attrs
import h11
import trio

from .._policy.lateness import judges_timeout, no_verdict_why, timed_out_why
from .loop_lag import lateness, loop_lag
from .probe_connect import Connect, connect_pacer, split_base_url, tcp_connect
from .probe_wire import (
    IDENTITY_HEADERS,
    KEEPALIVE_EXPIRY_S,
    MAX_BODY_BYTES,
    ProbeFailure,
    describe,
)

RECEIVE_BYTES = 64 * 1024
"""How much one read asks of the socket."""

USER_AGENT = "inferactors-probe"

UNLOOKED_IDLE_S = 0.05
"""A kept connection idle for less than this (float seconds) is reused without first
checking that the server has not closed it (one ``poll`` per request saved: a probe's
second GET follows its first at once)."""

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only

_write = os.write
"""Writes to a socket's descriptor (tests spy on it)."""

_read = os.read
"""Reads from a socket's descriptor (tests spy on it)."""


class _Stale(Exception):
    """A reused connection ended before a byte of a reply (the keep-alive race)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@attrs.define(eq=False)
class _Connection:
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
    def of(cls, stream: trio.abc.Stream) -> _Connection:
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


@attrs.define(eq=False)
class H11Wire:
    """One server's probe requests; see the module notes. Open with `H11Wire.open`."""

    host_header: str
    timeout_s: float
    connect: Connect = attrs.field(repr=False)
    headers: tuple[tuple[str, str], ...] = attrs.field(repr=False)  # may hold an API key
    _kept: _Connection | None = attrs.field(default=None, repr=False)
    _gets: dict[str, h11.Request] = attrs.field(factory=dict, repr=False)  # hold the key
    _closed: bool = False

    @classmethod
    def open(
        cls,
        base_url: str,
        *,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        connect: Connect | None = None,
    ) -> H11Wire:
        """A wire to ``base_url`` (``http://IP:PORT`` or ``http://name:PORT``).

        Raises:
            ValueError: ``base_url`` is not a plain ``http://host:port`` URL.
        """
        host, port, host_header = split_base_url(base_url)
        merged = {"User-Agent": USER_AGENT, **(headers or {}), **IDENTITY_HEADERS}
        return cls(
            host_header,
            timeout_s,
            connect or tcp_connect(host, port),
            tuple(merged.items()),
        )

    async def aclose(self) -> None:
        """Close the kept connection; idempotent."""
        self._closed = True
        kept, self._kept = self._kept, None
        if kept is not None:
            await trio.aclose_forcefully(kept.stream)

    async def exchange(
        self, method: str, path: str, body: Mapping[str, object] | None, deadline: float
    ) -> tuple[int, bytes]:
        """``method path`` (``body`` as JSON) by trio time ``deadline``; ``(status, body)``.

        Raises:
            ProbeFailure: transport error, timeout (kind ``"overloaded"`` when our own
                lateness ate the budget), a body over 1 MiB or encoded.
        """
        started = trio.current_time()
        scope = trio.CancelScope(deadline=deadline)  # a bare scope: no generator per request
        try:
            with scope:
                return await self._send(method, path, body, scope)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProbeFailure(f"{method} {path}: {_cause(exc)}") from exc
        except h11.ProtocolError as exc:
            raise ProbeFailure(f"{method} {path}: {describe(exc)}") from exc
        except _Stale as exc:
            raise ProbeFailure(f"{method} {path}: {_cause(exc.cause)}") from exc
        raise self._timed_out(f"{method} {path}", started, deadline, scope.deadline)

    def _timed_out(
        self, request: str, started: float, deadline: float, moved: float
    ) -> ProbeFailure:
        """The failure of a request begun at ``started`` whose deadline fired: ``deadline``
        as asked, ``moved`` as our pacer's wait moved it (`_new`)."""
        late = lateness(started, moved)
        paced_s = moved - deadline  # our pacer's wait: moved the deadline
        elapsed_s = trio.current_time() - started - paced_s
        if not judges_timeout(elapsed_s, late, self.timeout_s):
            why = no_verdict_why(request, late)
            loop_lag().lost_verdict(why)
            return ProbeFailure(why, kind="overloaded")
        why = timed_out_why(request, deadline - started, self.timeout_s)
        return ProbeFailure(why, kind="timeout")

    async def _send(
        self, method: str, path: str, body: Mapping[str, object] | None, scope: trio.CancelScope
    ) -> tuple[int, bytes]:
        if method != "GET":
            conn = await self._new(scope)
            try:
                return await self._round_trip(conn, *self._request(method, path, body))
            finally:
                await trio.aclose_forcefully(conn.stream)
        event = self._gets.get(path)
        if event is None:
            event = self._gets[path] = self._request("GET", path)[0]
        conn = await self._take(scope)
        try:
            return await self._round_trip(conn, event, b"")
        except _Stale:
            if not conn.reused:
                raise
        return await self._round_trip(await self._new(scope), event, b"")

    async def _take(self, scope: trio.CancelScope) -> _Connection:
        kept, self._kept = self._kept, None
        if kept is not None and kept.fresh_for_reuse(trio.current_time()):
            kept.reused = True
            return kept
        if kept is not None:
            await trio.aclose_forcefully(kept.stream)
        return await self._new(scope)

    async def _new(self, scope: trio.CancelScope) -> _Connection:
        """A new connection, once our pacer lets it go; the wait is ours, so the request's
        deadline (``scope``) moves by as much: a refused connect after it is a verdict at
        once, and a server that answers has its whole budget."""
        if self._closed:
            raise trio.ClosedResourceError("the probe client is closed")
        wait = connect_pacer().reserve()
        if wait > 0.0:
            scope.deadline += wait
            await trio.sleep(wait)
        return _Connection.of(await self.connect())

    async def _round_trip(
        self, conn: _Connection, event: h11.Request, body: bytes
    ) -> tuple[int, bytes]:
        """Send ``event`` and ``body`` in one write and read the reply; keep ``conn`` when
        the server lets it live (a GET's), else close it."""
        keep = False
        try:
            status, data, keep = await _exchange_on(conn, event, body)
            return status, data
        finally:
            if keep and not self._closed and event.method == b"GET" and self._kept is None:
                conn.h11.start_next_cycle()
                conn.idle_since = trio.current_time()
                self._kept = conn
            else:  # a second connection is never kept over the first: closed, not dropped
                await trio.aclose_forcefully(conn.stream)

    def _request(
        self, method: str, path: str, body: Mapping[str, object] | None = None
    ) -> tuple[h11.Request, bytes]:
        """The h11 request event and its body (JSON with its length, or empty)."""
        headers = [("Host", self.host_header), *self.headers]
        content = b""
        if body is not None:
            content = json.dumps(body, separators=(",", ":")).encode()
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(content)))]
        elif method != "GET":
            headers.append(("Content-Length", "0"))
        return h11.Request(method=method, target=path, headers=headers), content


async def _exchange_on(
    conn: _Connection, event: h11.Request, body: bytes
) -> tuple[int, bytes, bool]:
    """One request on ``conn``: ``(status, body, keep)``; ``keep``: the server lets the
    connection carry another request.

    Raises:
        _Stale: a reused connection failed before a byte of a reply.
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
            raise _Stale(exc) from exc
        raise
    keep = wire.our_state is h11.DONE and wire.their_state is h11.DONE
    return status, data, keep


def _named(request: h11.Request) -> str:
    """``"GET /health"``: how a failure names its request (made only when one fails)."""
    return f"{request.method.decode()} {request.target.decode()}"


async def _head(conn: _Connection, request: h11.Request) -> tuple[int, bool]:
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


async def _body(conn: _Connection, request: h11.Request) -> bytes:
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


def _cause(exc: BaseException) -> str:
    """An error's words; a broken stream says what broke it (a reset, a refused connect)."""
    inner = exc.__cause__ or exc.__context__
    if isinstance(exc, trio.BrokenResourceError) and inner is not None:
        return describe(inner)  # type: ignore[arg-type]  # an exception
    return describe(exc)  # type: ignore[arg-type]  # an exception
