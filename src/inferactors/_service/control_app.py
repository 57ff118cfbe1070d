"""The control API: a starlette app over a `Fleet` (``docs/control-api.md``).

Routes, all JSON through the one converter (`inferactors._config.convert_api`)::

    GET  /v1/instances                     {"instances": [InstanceView, ...]}
    GET  /v1/instances/{name}              InstanceView
    POST /v1/instances/{name}/start        InstanceView after      (also stop, restart)
    GET  /v1/instances/{name}/logs         NDJSON LogLines  ?lines=N (100) &follow=1
    GET  /v1/events                        NDJSON events    ?since=N (the last N; 20) &follow=1
    POST /v1/reload                        ReloadResult, or 400 with the config error
    GET  /metrics                          Prometheus text
    GET  /livez   /readyz   /readyz/{name} 200 or 503
    GET  /v1                               {"api", "version", "routes": [{"path", "methods"}]}
    GET  /v1/version                       {"name": "inferactors", "version", "api": "v1"}

With a web page (`Page`, ``ui_app.py``), its routes under ``/ui`` too.

Errors are ``{"error": {"code": ..., "message": ...}}``: the exception tree's code
(`inferactors._errors`) with the status of `ERROR_STATUS`; an unknown route is
``not-found``, a wrong method ``method-not-allowed``, anything unforeseen ``internal``
(500; the message names only the exception's type). A request that reached the TCP listener
must carry ``Authorization: Bearer <token>`` when the app was made with a token (401
``unauthorized`` otherwise), name a loopback host, and a browser's command must come from
a page of the same origin (``control_access.py``); the Unix socket is guarded by its mode
(`control_server`). ``follow`` takes ``1 true yes on`` or ``0 false no off`` (any case;
anything else is a 400). A follow stream ends when the client leaves: its subscription is
closed and no task stays behind. It also ends when the fleet closes its channel (the
supervisor is stopping): what was queued is sent, then the body ends cleanly.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from .._config.convert_api import api_data, event_data
from .._edges.log_ring import LogLine
from .._errors import (
    AdmissionRefused,
    InferactorsError,
    InvalidConfig,
    InvalidState,
    ModelError,
    UnknownInstance,
    Unsupported,
)
from .._events import Event
from .._version import package_version
from .control_access import BearerOnTcp, BrowserGuard, error_body
from .control_access import ReadOnly as ReadOnly
from .control_access import bearer_token as bearer_token
from .views import InstanceView, ReadyView, ReloadResult

LIVE_DEADLINE_S = 2.0
"""How long ``/livez`` waits for every runtime's actor tree to answer, float seconds."""
DEFAULT_LOG_LINES = 100
DEFAULT_EVENTS = 20
MAX_LINES = 100_000
"""The most lines or events one request may ask for (``lines``, ``since``)."""
NDJSON = "application/x-ndjson"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

ERROR_STATUS: tuple[tuple[type[InferactorsError], int], ...] = (
    (UnknownInstance, 404),
    (InvalidConfig, 400),
    (InvalidState, 409),
    (Unsupported, 409),
    (AdmissionRefused, 409),
    (ModelError, 409),
    (InferactorsError, 500),
)
"""The HTTP status of each error of the tree (the first class that matches wins)."""


class ControlledFleet(Protocol):
    """What the control API uses of a `Fleet` (the contract's interface, in part)."""

    def views(self) -> tuple[InstanceView, ...]: ...
    def view(self, name: str) -> InstanceView: ...
    async def start(self, name: str) -> InstanceView: ...
    async def stop(self, name: str) -> InstanceView: ...
    async def restart(self, name: str) -> InstanceView: ...
    async def reload(self) -> ReloadResult: ...
    def log_tail(self, name: str, lines: int) -> tuple[LogLine, ...]: ...
    def follow_logs(
        self, name: str
    ) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[LogLine]]: ...
    def recent_events(self, n: int) -> tuple[Event, ...]: ...
    def follow_events(
        self,
    ) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[Event]]: ...
    async def alive(self, deadline_s: float) -> bool: ...
    def readiness(self) -> tuple[ReadyView, ...]: ...
    def metrics_text(self) -> bytes: ...
    async def refresh_metrics(self) -> None: ...


def _error_response(error: InferactorsError) -> JSONResponse:
    status = next(code for cl, code in ERROR_STATUS if isinstance(error, cl))
    return JSONResponse(error_body(error.code, str(error)), status_code=status)


async def _on_inferactors_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, InferactorsError)
    return _error_response(error)


async def _on_http_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    codes = {404: "not-found", 405: "method-not-allowed"}
    code = codes.get(error.status_code, f"http-{error.status_code}")
    return JSONResponse(
        error_body(code, str(error.detail)), status_code=error.status_code, headers=error.headers
    )


async def _on_unforeseen(_: Request, error: Exception) -> Response:
    message = f"the supervisor failed to answer ({type(error).__name__})"
    return JSONResponse(error_body("internal", message), status_code=500)


def _count(request: Request, key: str, default: int) -> int:
    """The query parameter ``key`` as a count 0..`MAX_LINES`.

    Raises:
        InvalidConfig: not a whole number in that range.
    """
    text = request.query_params.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) > MAX_LINES:
        raise InvalidConfig(f"{key} must be a whole number from 0 to {MAX_LINES}")
    return int(text)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(request: Request, key: str) -> bool:
    """The boolean query parameter ``key`` (absent: false): ``1 true yes on`` or
    ``0 false no off``, in any case.

    Raises:
        InvalidConfig: any other value.
    """
    text = request.query_params.get(key, "0").lower()
    if text not in _TRUE | _FALSE:
        raise InvalidConfig(f"{key} must be one of 1, true, yes, on, 0, false, no, off")
    return text in _TRUE


def _ndjson(item: dict[str, Any]) -> bytes:
    return json.dumps(item, separators=(",", ":")).encode() + b"\n"


class _Routes:
    """The route handlers, bound to one fleet."""

    def __init__(self, fleet: ControlledFleet, live_deadline_s: float) -> None:
        self.fleet = fleet
        self.live_deadline_s = live_deadline_s

    async def instances(self, request: Request) -> Response:
        return JSONResponse({"instances": [api_data(view) for view in self.fleet.views()]})

    async def instance(self, request: Request) -> Response:
        return JSONResponse(api_data(self.fleet.view(request.path_params["name"])))

    def command(self, act: Callable[[str], Awaitable[InstanceView]]) -> Callable[..., Any]:
        async def handle(request: Request) -> Response:
            return JSONResponse(api_data(await act(request.path_params["name"])))

        return handle

    async def reload(self, request: Request) -> Response:
        return JSONResponse(api_data(await self.fleet.reload()))

    async def logs(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.fleet.view(name)  # UnknownInstance: 404 before any line
        lines = _count(request, "lines", DEFAULT_LOG_LINES)
        if not _flag(request, "follow"):
            tail = self.fleet.log_tail(name, lines)
            return Response(b"".join(_ndjson(api_data(line)) for line in tail), media_type=NDJSON)
        return StreamingResponse(self._follow_logs(name, lines), media_type=NDJSON)

    async def _follow_logs(self, name: str, lines: int) -> AsyncIterator[bytes]:
        # No checkpoint between the tail and the subscription: no line is missed or doubled.
        tail = self.fleet.log_tail(name, lines)
        with self.fleet.follow_logs(name) as channel:
            yield b"".join(_ndjson(api_data(line)) for line in tail)
            async for line in channel:
                yield _ndjson(api_data(line))

    async def events(self, request: Request) -> Response:
        since = _count(request, "since", DEFAULT_EVENTS)
        if not _flag(request, "follow"):
            recent = self.fleet.recent_events(since)
            return Response(_event_lines(recent), media_type=NDJSON)
        return StreamingResponse(self._follow_events(since), media_type=NDJSON)

    async def _follow_events(self, since: int) -> AsyncIterator[bytes]:
        recent = self.fleet.recent_events(since)
        with self.fleet.follow_events() as channel:
            yield _event_lines(recent)
            async for event in channel:
                yield _ndjson(event_data(event))

    async def metrics(self, request: Request) -> Response:
        await self.fleet.refresh_metrics()
        return Response(self.fleet.metrics_text(), media_type=PROMETHEUS_TEXT)

    async def livez(self, request: Request) -> Response:
        alive = False
        with trio.move_on_after(self.live_deadline_s):
            alive = await self.fleet.alive(self.live_deadline_s)
        if alive:
            return PlainTextResponse("ok\n")
        why = f"not alive: the actor tree did not answer within {self.live_deadline_s:g} s\n"
        return PlainTextResponse(why, status_code=503)

    async def readyz(self, request: Request) -> Response:
        waited = [one for one in self.fleet.readiness() if one.required and not one.ready]
        body = {
            "ready": not waited,
            "not_ready": [one.name for one in waited],
            "reasons": {one.name: one.reason for one in waited},
        }
        return JSONResponse(body, status_code=503 if waited else 200)

    async def readyz_one(self, request: Request) -> Response:
        name = self.fleet.view(request.path_params["name"]).name  # UnknownInstance: 404
        one = next(one for one in self.fleet.readiness() if one.name == name)
        body = {
            "name": one.name,
            "ready": one.ready,
            "state": one.state,
            "required": one.required,
            "reason": one.reason,
        }
        return JSONResponse(body, status_code=200 if one.ready else 503)


def _event_lines(events: Iterable[Event]) -> bytes:
    return b"".join(_ndjson(event_data(event)) for event in events)


API = "v1"
"""The control API's version: its routes' prefix."""


async def api_version(request: Request) -> Response:
    """``GET /v1/version``: the supervisor's package version and the API's."""
    return JSONResponse({"name": "inferactors", "version": package_version(), "api": API})


async def api_index(request: Request) -> Response:
    """``GET /v1``: the API's version and every route the app serves, with its methods."""
    served = [
        {"path": route.path, "methods": sorted(route.methods or ())}
        for route in request.app.routes
        if isinstance(route, Route)
    ]
    return JSONResponse({"api": API, "version": package_version(), "routes": served})


class Page(Protocol):
    """A web page served beside the API (``ui_app.WebPage``): its routes, and which of
    its requests hold nothing private (its shell: served over TCP without the token)."""

    def routes(self) -> list[BaseRoute]: ...
    def open_to_all(self, method: str, path: str) -> bool: ...


def control_app(
    fleet: ControlledFleet,
    *,
    token: str | None = None,
    live_deadline_s: float = LIVE_DEADLINE_S,
    page: Page | None = None,
) -> ASGIApp:
    """The control API's ASGI app over ``fleet`` (module docstring).

    Args:
        fleet: The supervisor's fleet.
        token: When given, requests over TCP must carry it as a bearer token, name a
            loopback host, and a browser's commands must come from the same origin
            (`control_access.BrowserGuard`).
        live_deadline_s: How long ``/livez`` waits for the actor trees, float seconds.
        page: A web page to serve beside the API (its routes under ``/ui``).
    """
    routes = _Routes(fleet, live_deadline_s)
    app = Starlette(
        routes=[
            Route("/v1/instances", routes.instances),
            Route("/v1/instances/{name}", routes.instance),
            Route("/v1/instances/{name}/start", routes.command(fleet.start), methods=["POST"]),
            Route("/v1/instances/{name}/stop", routes.command(fleet.stop), methods=["POST"]),
            Route("/v1/instances/{name}/restart", routes.command(fleet.restart), methods=["POST"]),
            Route("/v1/instances/{name}/logs", routes.logs),
            Route("/v1/events", routes.events),
            Route("/v1/reload", routes.reload, methods=["POST"]),
            Route("/metrics", routes.metrics),
            Route("/livez", routes.livez),
            Route("/readyz", routes.readyz),
            Route("/readyz/{name}", routes.readyz_one),
            Route("/v1", api_index),
            Route("/v1/version", api_version),
            *(page.routes() if page is not None else []),
        ],
        exception_handlers={
            InferactorsError: _on_inferactors_error,
            HTTPException: _on_http_error,
            Exception: _on_unforeseen,
        },
    )
    if token is None:
        return app
    open_to_all = page.open_to_all if page is not None else _nothing_open
    return BrowserGuard(BearerOnTcp(app, token, open_to_all))


def _nothing_open(method: str, path: str) -> bool:
    return False
