"""How the front door answers what goes wrong before a grant, and its API key: every
answer in the dialect of the route (`inferactors._policy.dialects`).

- a refused request (`FrontDoorRefused` from the scheduler, `BadRequest` for its body):
  its status and message, ``Retry-After`` when a retry may help;
- an unknown route (404) or method (405), in the route's dialect;
- a client gone before its request was read: nothing to answer (499 in the log);
- anything unforeseen: 500 naming what failed (the exception's type and words), with
  ``x-should-retry: false`` (the request may have reached a server already; the ``openai``
  client would otherwise send it again on its own); a grant it held was ended
  (``front_door_steps.DoorSteps.answer``);
- `RequireKey`: with an API key, a request without ``Authorization: Bearer <key>`` is a 401;
- `RefuseBrowsers`: a request a web page sent (a foreign ``Origin`` or ``Sec-Fetch-Site``,
  or on loopback a ``Host`` that is not loopback: DNS rebinding) is a 403
  (``_policy/browser_guard.py``).
"""

from __future__ import annotations

import hmac
import math

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import BadRequest, FrontDoorRefused, one_line
from .._policy.browser_guard import browser_refusal
from .._policy.dialects import Dialect, error_document
from .control_app import bearer_token
from .front_door_body import ClientGone
from .front_door_relay import retry_header
from .json_answer import JsonAnswer


def error_response(
    dialect: Dialect,
    status: int,
    message: str,
    *,
    param: str | None = None,
    retry_after_s: float | None = None,
    should_retry: bool | None = None,
) -> Response:
    """An error answer in ``dialect``'s shape, with ``Retry-After`` (whole seconds, rounded
    up) when a retry may help, and ``x-should-retry`` when ``should_retry`` is known: the
    header the ``openai`` client obeys before its own rule (which retries every 5xx), so a
    refusal no retry can help is not sent again."""
    headers = {} if retry_after_s is None else {"Retry-After": str(math.ceil(retry_after_s))}
    headers |= retry_header(should_retry)
    body = error_document(dialect, status, message, param=param)
    return JsonAnswer(body, status_code=status, headers=headers)


def refusal_response(dialect: Dialect, error: FrontDoorRefused | BadRequest) -> Response:
    """The answer to a refused request: its status, its message, and for a refusal its
    ``Retry-After``; a message that starts with a field path (``$.model: ...``) names that
    field as ``param``."""
    message = str(error)
    param = message[2:].split(":", 1)[0] if message.startswith("$.") else None
    if isinstance(error, BadRequest):
        return error_response(dialect, error.status, message, param=param)
    retry = error.retry_after_s
    return error_response(
        dialect,
        error.status,
        message,
        param=param,
        retry_after_s=retry,
        should_retry=retry is not None,
    )


def dialect_of(path: str) -> Dialect:
    """The dialect of a route: ``/api/...`` Ollama, ``/v1/...`` OpenAI, the rest llama.cpp."""
    if path.startswith("/api/"):
        return Dialect.OLLAMA
    return Dialect.OPENAI if path.startswith("/v1/") else Dialect.LLAMACPP


async def _on_refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, FrontDoorRefused | BadRequest)
    return refusal_response(dialect_of(request.url.path), error)


async def _on_client_gone(request: Request, error: Exception) -> Response:
    return Response(status_code=499)


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    dialect = dialect_of(request.url.path)
    words = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed here"}
    message = words.get(error.status_code, str(error.detail))
    document = error_document(dialect, error.status_code, message)
    return JsonAnswer(document, status_code=error.status_code, headers=error.headers)


async def _on_unforeseen(request: Request, error: Exception) -> Response:
    return error_response(
        dialect_of(request.url.path), 500, unforeseen_words(error), should_retry=False
    )


def unforeseen_words(error: BaseException) -> str:
    """What failed, in words, for the 500 of an error nobody foresaw: the exception's type
    and its own message (one line, cut), the single error inside an exception group."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    what = one_line(str(error), 300)
    named = type(error).__name__ + (f": {what}" if what else "")
    return f"the front door failed to answer this request (a fault of the front door): {named}"


class RequireKey:
    """ASGI middleware: every request must carry ``Authorization: Bearer <key>`` (the scheme
    in any case); compared in constant time; a 401 in the route's dialect otherwise."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = bearer_token(dict(scope["headers"]).get(b"authorization", b"")) or b""
            if not hmac.compare_digest(given, self.expected):
                dialect = dialect_of(scope["path"])
                body = error_document(dialect, 401, "Invalid API Key: send Authorization: Bearer")
                answer = JsonAnswer(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RefuseBrowsers:
    """ASGI middleware: a request from a web page (another site's ``Origin`` or
    ``Sec-Fetch-Site``; on loopback, a ``Host`` that is not loopback) is refused with 403
    in the route's dialect before anything is read, started or forwarded."""

    def __init__(self, app: ASGIApp, *, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            refusal = browser_refusal(
                _text(headers.get(b"host")),
                _text(headers.get(b"origin")),
                _text(headers.get(b"sec-fetch-site")),
                loopback_only=self.loopback_only,
            )
            if refusal is not None:
                body = error_document(dialect_of(scope["path"]), 403, refusal.message)
                await JsonAnswer(body, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


EXCEPTION_HANDLERS = {
    FrontDoorRefused: _on_refused,
    BadRequest: _on_refused,
    ClientGone: _on_client_gone,
    HTTPException: _on_http_error,
    Exception: _on_unforeseen,
}
"""The front door app's exception handlers (module docstring)."""
