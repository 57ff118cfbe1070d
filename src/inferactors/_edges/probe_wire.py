"""One probe request on the wire: what every wire shares (the body cap, the identity
encoding, `ProbeFailure`, the `Wire` protocol) and the httpx wire (`HttpxWire`: kept-alive
connections, the one-deadline exchange, the stale-connection retry), used when a test
injects an httpx transport or the URL is not plain ``http://host:port``; the lean h11 wire
the supervisor probes with is ``probe_h11``.

Keep-alive: a probe client keeps at most one idle connection
(`KEEPALIVE_CONNECTIONS`) for `KEEPALIVE_EXPIRY_S`, longer than the 1 s probe interval, so
the monitor's probes of one server reuse one TCP connection instead of leaving a socket in
TIME_WAIT per request. One, because llama-server's HTTP layer (cpp-httplib) parks a worker
thread on each idle keep-alive connection: its pool is sized for the slots plus two for
monitoring (ggml-org/llama.cpp#5836), and when requests outnumber its threads ``/health``
stops answering (ggml-org/llama.cpp#20684, fixed by on-demand threads in #20817). Under
cpp-httplib's own 5 s idle timeout, so we, not the server, close an idle connection.

The keep-alive race: a server may close an idle connection just as we send on it. A GET that
fails so (a transport error on a REUSED connection before any byte of a reply: httpx's
``RemoteProtocolError`` "Server disconnected without sending a response", ``ReadError``,
``WriteError``) is sent once more, on a fresh connection, within the same deadline; the
connection's history comes from httpcore's ``trace`` request extension (a TCP connect seen
or not). A POST (a completion) is never sent twice.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncGenerator, Mapping
from typing import Literal, Protocol, TypeAlias, cast

import attrs
import httpx
import trio

from .._errors import BackendError
from .._policy.lateness import LATE_S as LATE_S
from .._policy.lateness import timed_out_why
from .loop_lag import no_verdict

MAX_BODY_BYTES = 1024 * 1024
"""Largest response body a probe reads: 1 MiB."""

IDENTITY_HEADERS = {"Accept-Encoding": "identity"}
"""Sent with every request: a body we read is never compressed (a bomb cannot inflate)."""

KEEPALIVE_CONNECTIONS = 1
"""Idle connections a probe client keeps open (per client, so per server)."""

KEEPALIVE_EXPIRY_S = 3.0
"""How long an idle connection is kept (float seconds): over the 1 s probe interval, under
cpp-httplib's 5 s keep-alive timeout."""

FailureKind: TypeAlias = Literal["transport", "timeout", "overloaded", "too-large", "encoded"]

_STALE_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class ProbeFailure(BackendError):
    """A probe request got no usable reply; ``why`` names the request and the cause.

    ``kind`` is ``"transport"`` (refused, reset, protocol error), ``"timeout"`` (no complete
    reply within the call's deadline), ``"overloaded"`` (a timeout whose budget our own loop
    ate, more than `LATE_S` of it: no verdict on the server, ``_policy/lateness.py``),
    ``"too-large"`` (body over 1 MiB) or ``"encoded"``
    (a ``Content-Encoding`` other than identity, refused before its body is read).
    """

    def __init__(self, why: str, *, kind: FailureKind = "transport") -> None:
        super().__init__(why)
        self.why = why
        self.kind: FailureKind = kind

    @property
    def answered(self) -> bool:
        """Whether the server did answer, only unusably (too large or encoded): unhealthy
        rather than unreachable."""
        return self.kind in ("too-large", "encoded")


def pool_limits() -> httpx.Limits:
    """The connection pool of a probe client: at most `KEEPALIVE_CONNECTIONS` idle, each for
    at most `KEEPALIVE_EXPIRY_S`."""
    return httpx.Limits(
        max_keepalive_connections=KEEPALIVE_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_S
    )


@attrs.define
class _Trace:
    """What httpcore did for one request (its ``trace`` extension): sent it, over a fresh TCP
    connection or not, and whether a reply's head came back."""

    sent: bool = False
    connected: bool = False
    answered: bool = False

    async def __call__(self, name: str, info: Mapping[str, object]) -> None:
        if name == "connection.connect_tcp.started":
            self.connected = True
        elif name == "http11.send_request_headers.started":
            self.sent = True
        elif name == "http11.receive_response_headers.complete":
            self.answered = True

    @property
    def stale(self) -> bool:
        """Sent over a reused connection, and no reply came back on it."""
        return self.sent and not self.connected and not self.answered


async def exchange(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: Mapping[str, object] | None,
    deadline: float,
    timeout_s: float,
) -> tuple[int, bytes]:
    """``method path`` (``body`` as JSON) by trio time ``deadline``; ``(status, body)``. A
    GET that met a stale kept-alive connection is sent once more (module docstring).

    Raises:
        ProbeFailure: transport error, timeout (``timeout_s`` names the budget), a body over
            1 MiB or encoded.
    """
    request = f"{method} {path}"
    started = trio.current_time()
    try:
        with trio.fail_at(deadline):
            trace = _Trace()
            try:
                return await _attempt(client, method, path, body, trace)
            except _STALE_ERRORS:
                if method != "GET" or not trace.stale:
                    raise
            return await _attempt(client, method, path, body, _Trace())
    except (trio.TooSlowError, httpx.TimeoutException) as exc:
        late = no_verdict(request, started, deadline, budget_s=timeout_s)
        if late is not None:
            raise ProbeFailure(late, kind="overloaded") from exc
        why = timed_out_why(request, deadline - started, timeout_s)
        raise ProbeFailure(why, kind="timeout") from exc
    except httpx.HTTPError as exc:
        raise ProbeFailure(f"{request}: {describe(exc)}") from exc


async def _attempt(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: Mapping[str, object] | None,
    trace: _Trace,
) -> tuple[int, bytes]:
    extensions = {"trace": trace}
    async with client.stream(method, path, json=body, extensions=extensions) as response:
        return response.status_code, await read_capped(response, f"{method} {path}")


async def read_capped(response: httpx.Response, request: str) -> bytes:
    """Read the raw body chunk by chunk; stop as soon as it passes `MAX_BODY_BYTES`.

    A ``Content-Encoding`` other than identity is refused before any byte is read (we asked
    for identity; decoding would let a small compressed body inflate in memory, since
    httpx's decoders have no output limit), so the bytes httpx yields are the bytes received,
    never inflated. A declared Content-Length over the cap fails before any byte is read.
    A body cut short leaves httpx's nested stream generators unfinished: trio closes them
    itself, with a ResourceWarning (httpx 0.28, encode/httpx#3686), which is harmless.
    """
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        shown = encoding[:40]
        why = f"{request}: reply is {shown}-encoded; we asked for identity (refused unread)"
        raise ProbeFailure(why, kind="encoded")
    too_large = ProbeFailure(f"{request}: response too large (over 1 MiB)", kind="too-large")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 9 or int(declared) > MAX_BODY_BYTES):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    stream = cast(AsyncGenerator[bytes, None], response.aiter_bytes())  # it is one
    async with contextlib.aclosing(stream) as body:
        async for chunk in body:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise too_large
            chunks.append(chunk)
    return b"".join(chunks)


def describe(exc: Exception) -> str:
    """An exception's message, or its type's name when it has none."""
    return str(exc) or type(exc).__name__


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every probe client: httpx would otherwise build (and load the CA
    bundle into) a fresh one per client, 24 to 54 ms of blocked event loop each time on
    this machine (bench/README.md), although the servers we probe speak plain HTTP."""
    return ssl.create_default_context()


class Wire(Protocol):
    """How `probe.ProbeClient` sends one request: ``exchange`` by a trio-time deadline,
    ``(status, body)``, raising `ProbeFailure`; ``aclose`` is idempotent."""

    async def exchange(
        self, method: str, path: str, body: Mapping[str, object] | None, deadline: float
    ) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


@attrs.define(eq=False)
class HttpxWire:
    """The httpx `Wire`: one client for GETs (`pool_limits`), one opened at the first POST
    with no kept connection (a POST never rides a connection the server may be closing)."""

    timeout_s: float
    client: httpx.AsyncClient
    _open_posting: functools.partial[httpx.AsyncClient] = attrs.field(repr=False)
    _posting: httpx.AsyncClient | None = attrs.field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        base_url: str,
        *,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpxWire:
        """httpx clients for ``base_url``: no redirects, no proxy variables, ``timeout_s``
        for connect, read and write, ``headers`` plus identity encoding on every request."""
        opener = functools.partial(
            httpx.AsyncClient,
            base_url=base_url,
            transport=transport,
            follow_redirects=False,
            trust_env=False,
            timeout=httpx.Timeout(timeout_s),
            headers={**(headers or {}), **IDENTITY_HEADERS},
            verify=shared_ssl_context(),
        )
        client = opener(limits=pool_limits())
        posting = functools.partial(opener, limits=httpx.Limits(max_keepalive_connections=0))
        return cls(timeout_s, client, posting)

    async def exchange(
        self, method: str, path: str, body: Mapping[str, object] | None, deadline: float
    ) -> tuple[int, bytes]:
        """See `Wire`; the module function `exchange` on the right client."""
        client = self.client
        if method != "GET":  # opened at its first POST: most probe clients never send one
            client = self._posting = self._posting or self._open_posting()
        return await exchange(client, method, path, body, deadline, self.timeout_s)

    async def aclose(self) -> None:
        """Close both clients."""
        await self.client.aclose()
        if self._posting is not None:
            await self._posting.aclose()
