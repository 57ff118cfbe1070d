"""Who may ask the control API what: ASGI middleware in front of its app.

- `BearerOnTcp`: a request that came over TCP carries the bearer token (some paths may be
  open to all: the web page's shell, which holds no data);
- `BrowserGuard`: over TCP, a request names a loopback host (a DNS name pointed at
  127.0.0.1 by another site, "DNS rebinding", is refused), and a command (any method but
  GET and HEAD) sent by a browser comes from a page of the listener's own origin;
- `ReadOnly`: the read-only socket answers GET and HEAD only.

A request over the Unix socket has no client address in its scope: only `ReadOnly`
applies to it (the socket's mode decides who connects). Every refusal is the API's error
body (`error_body`).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .._policy.browser_guard import browser_refusal

READS = ("GET", "HEAD")
"""The methods that never change anything."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\%]")
"""What no decoded segment may hold: control characters, separators, percent signs."""


def plain_segments(raw: bytes) -> list[str] | None:
    """The percent-decoded segments of the path ``raw`` (as the client sent it, after its
    leading ``/``; a trailing ``/`` gives a last empty segment), or None when it could name
    another path once normalised by someone: a ``\\`` anywhere, or a segment that is empty
    (``//``), a dot segment (``.``, ``..``, ``%2e%2e``), holds a ``/``, ``\\`` or ``%`` once
    decoded (``%2f``, ``%5c``, double encoding) or a control character, or is not UTF-8."""
    if not raw.startswith(b"/") or b"\\" in raw:
        return None
    parts = raw[1:].split(b"/")
    decoded: list[str] = []
    for number, part in enumerate(parts):
        last = number == len(parts) - 1
        try:
            text = unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if (text == "" and not last) or text in (".", "..") or _UNSAFE.search(text):
            return None
        decoded.append(text)
    return decoded


def error_body(code: str, message: str) -> dict[str, Any]:
    """The body of every error answer: ``{"error": {"code": ..., "message": ...}}``."""
    return {"error": {"code": code, "message": message}}


def bearer_token(authorization: bytes) -> bytes | None:
    """The credentials of an ``Authorization`` header value whose scheme is ``Bearer``
    (in any case, RFC 7235), else None."""
    scheme, _, credentials = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip(b" ")


def _over_tcp(scope: Scope) -> bool:
    return scope["type"] == "http" and scope.get("client") is not None


def _nobody(method: str, path: str) -> bool:
    return False


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    error: tuple[str, str],
    headers: dict[str, str] | None = None,
) -> None:
    answer = JSONResponse(error_body(*error), status_code=status, headers=headers)
    await answer(scope, receive, send)


class BearerOnTcp:
    """ASGI middleware: a request that came over TCP (its scope names a client address)
    must carry ``Authorization: Bearer <token>`` (the scheme in any case), unless
    ``open_to_all(method, path)`` says that path holds nothing private; Unix-socket
    requests pass (their scope has no client address). The token is compared in constant
    time."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_to_all: Callable[[str, str], bool] = _nobody,
    ) -> None:
        self.app = app
        self.expected = token.encode()
        self.open_to_all = open_to_all

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _over_tcp(scope) and not self.open_to_all(scope["method"], scope["path"]):
            given = bearer_token(dict(scope["headers"]).get(b"authorization", b"")) or b""
            if not hmac.compare_digest(given, self.expected):
                error = ("unauthorized", "a bearer token is required on TCP")
                challenge = {"WWW-Authenticate": "Bearer"}
                await _refuse(scope, receive, send, 401, error, challenge)
                return
        await self.app(scope, receive, send)


class BrowserGuard:
    """ASGI middleware against other sites' pages, for requests over TCP:

    - the path, as sent, must be plain (`plain_segments`), else ``404 not-found``: no
      route is chosen on a path another layer would read differently;
    - the ``Host`` header must name a loopback address or ``localhost`` (with any port),
      else ``403 bad-host``: a site whose name was pointed at 127.0.0.1 cannot talk to the
      API as if it were its own origin;
    - a command (any method but GET and HEAD) with an ``Origin`` header must come from
      ``http://<its Host>``, and one with ``Sec-Fetch-Site`` from the same origin (or
      typed by the user: ``none``), else ``403 cross-origin``. A client that is not a
      browser sends neither header and passes (it still needs the token).

    The rule is the front door's (`inferactors._policy.browser_guard.browser_refusal`),
    reads exempt from the origin checks.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _over_tcp(scope):
            if plain_segments(scope.get("raw_path") or scope["path"].encode()) is None:
                message = "the path is not plain (dot segments, encoded separators)"
                await _refuse(scope, receive, send, 404, ("not-found", message))
                return
            headers = dict(scope["headers"])
            refusal = browser_refusal(
                _text(headers.get(b"host")),
                _text(headers.get(b"origin")),
                _text(headers.get(b"sec-fetch-site")),
                loopback_only=True,
                check_origin=scope["method"] not in READS,
            )
            if refusal is not None:
                code = "bad-host" if refusal.header == "Host" else "cross-origin"
                await _refuse(scope, receive, send, 403, (code, refusal.message))
                return
        await self.app(scope, receive, send)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class ReadOnly:
    """ASGI middleware of the read-only socket: GET and HEAD pass (views, logs, events,
    metrics, probes); any other method is ``403 read-only``, before the route is looked
    at."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in READS:
            message = "this socket is read-only: status, logs, events, metrics and probes"
            await _refuse(scope, receive, send, 403, ("read-only", message))
            return
        await self.app(scope, receive, send)
