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

One connection, its lean reads and writes, and the framing and bounds of one request and
reply on it are ``probe_h11_conn``; this module is the wire's policy over them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs
import h11
import trio

from .._policy.lateness import judges_timeout, no_verdict_why
from .loop_lag import lateness, loop_lag
from .probe_connect import Connect, connect_pacer, split_base_url, tcp_connect
from .probe_h11_conn import Connection, Stale, exchange_on
from .probe_wire import IDENTITY_HEADERS, ProbeFailure, describe

USER_AGENT = "inferactors-probe"


@attrs.define(eq=False)
class H11Wire:
    """One server's probe requests; see the module notes. Open with `H11Wire.open`."""

    host_header: str
    timeout_s: float
    connect: Connect = attrs.field(repr=False)
    headers: tuple[tuple[str, str], ...] = attrs.field(repr=False)  # may hold an API key
    _kept: Connection | None = attrs.field(default=None, repr=False)
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
        except Stale as exc:
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
        return ProbeFailure(
            f"{request}: no complete reply within {self.timeout_s:g} s", kind="timeout"
        )

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
        except Stale:
            if not conn.reused:
                raise
        return await self._round_trip(await self._new(scope), event, b"")

    async def _take(self, scope: trio.CancelScope) -> Connection:
        kept, self._kept = self._kept, None
        if kept is not None and kept.fresh_for_reuse(trio.current_time()):
            kept.reused = True
            return kept
        if kept is not None:
            await trio.aclose_forcefully(kept.stream)
        return await self._new(scope)

    async def _new(self, scope: trio.CancelScope) -> Connection:
        """A new connection, once our pacer lets it go; the wait is ours, so the request's
        deadline (``scope``) moves by as much: a refused connect after it is a verdict at
        once, and a server that answers has its whole budget."""
        if self._closed:
            raise trio.ClosedResourceError("the probe client is closed")
        wait = connect_pacer().reserve()
        if wait > 0.0:
            scope.deadline += wait
            await trio.sleep(wait)
        return Connection.of(await self.connect())

    async def _round_trip(
        self, conn: Connection, event: h11.Request, body: bytes
    ) -> tuple[int, bytes]:
        """Send ``event`` and ``body`` in one write and read the reply; keep ``conn`` when
        the server lets it live (a GET's), else close it."""
        keep = False
        try:
            status, data, keep = await exchange_on(conn, event, body)
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


def _cause(exc: BaseException) -> str:
    """An error's words; a broken stream says what broke it (a reset, a refused connect)."""
    inner = exc.__cause__ or exc.__context__
    if isinstance(exc, trio.BrokenResourceError) and inner is not None:
        return describe(inner)  # type: ignore[arg-type]  # an exception
    return describe(exc)  # type: ignore[arg-type]  # an exception
