"""The front door's ASGI app: one address for every model of a run, in three dialects.

Routes (each request names its model in its body's ``"model"``, or in the path for
``/upstream/NAME/...``; an unknown model is a 404 naming the models there are):

- OpenAI, every flavor: ``POST /v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings``, ``/v1/rerank`` (llama-server only: its ``--reranking``), ``GET
  /v1/models``.
- llama.cpp native, llama-server instances: ``POST /completion``, ``/infill``,
  ``/tokenize``, ``/detokenize``; and ``/upstream/NAME/PATH`` (any method): the request
  passed on as it is to ``PATH`` on the server of model NAME (``/upstream/chat/props``).
- Ollama native: ``POST /api/chat``, ``/api/generate``, ``/api/embed``, ``/api/show``,
  ``GET /api/tags``, ``/api/ps``, ``/api/version``: passed on to Ollama instances, and
  translated for llama-server and mlx_lm.server ones (``front_door_translate``).
  A load request (``/api/generate`` or ``/api/chat`` without prompt or messages) for a
  translated model answers ``done_reason`` ``"load"`` once the instance is granted; one
  with ``"keep_alive": 0`` (unload) is refused with 400: residency there is the front
  door scheduler's (its idle TTL), not a client's.

Each request is read (`front_door_body`), granted by the `Scheduler`
(``_actors/front_door_seam.py``; a client that leaves while it waits withdraws), and
answered by a `GrantedAnswer` (``front_door_relay``), which ends the grant exactly once.
Errors come in the dialect of the route (`inferactors._policy.dialects`): an unknown
route or method too, and anything unforeseen (500, naming only the exception's type).
With an API key, every request must carry ``Authorization: Bearer <key>`` (401 in the
dialect otherwise; compared in constant time). A request a web page sent is refused
with 403 before anything starts (``_policy/browser_guard.py``): another site's ``Origin``
or ``Sec-Fetch-Site``, and on loopback a ``Host`` that is not loopback (DNS rebinding).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import attrs
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .._actors.front_door_names import find_model, model_list, unknown_model
from .._actors.front_door_seam import Grant, ModelEntry, Scheduler
from .._edges.upstream import UpstreamClients
from .._errors import BadRequest, FrontDoorRefused, InvalidConfig
from .._flavor import InferFlavor
from .._policy import ollama_requests as ollama
from .._policy.dialects import Dialect
from .._policy.ollama_replies import Kind, load_reply, ollama_time
from .._policy.stream_end import StreamEnd
from . import front_door_lists as lists
from .client_gone import cancelled_when_gone
from .front_door_body import (
    BodyLimits,
    json_content_type,
    model_name,
    read_body,
)
from .front_door_errors import EXCEPTION_HANDLERS, RefuseBrowsers, RequireKey, dialect_of
from .front_door_intake import Intake, IntakeLimits
from .front_door_metrics import MODEL_KEY, FrontDoorMetrics, Measured
from .front_door_relay import Outbound, PassThrough, ReplyLimits
from .front_door_translate import Shape, Translated

_T = TypeVar("_T")

JSON_HEADERS = {"Content-Type": "application/json"}
_UPSTREAM_DROPPED = frozenset(
    {"host", "authorization", "content-length", "connection", "keep-alive", "te",
     "transfer-encoding", "upgrade", "accept-encoding", "proxy-authorization"}
)  # fmt: skip


@attrs.frozen
class FrontDoorLimits:
    """What the front door reads from clients and servers (`BodyLimits`, `ReplyLimits`), and
    how many bodies at once (`IntakeLimits`)."""

    body: BodyLimits = BodyLimits()  # noqa: RUF009  (frozen value)
    reply: ReplyLimits = ReplyLimits()  # noqa: RUF009  (frozen value)
    intake: IntakeLimits = IntakeLimits()  # noqa: RUF009  (frozen value)


@attrs.frozen
class _Asked:
    """One request read: its body, its JSON, the model entry it names, when it came."""

    body: bytes
    document: dict[str, Any]
    name: str
    entry: ModelEntry
    arrived_at: float


class _Door:
    """The route handlers over one scheduler."""

    def __init__(self, scheduler: Scheduler, clients: UpstreamClients, limits: FrontDoorLimits):
        self.scheduler = scheduler
        self.clients = clients
        self.limits = limits
        self.intake = Intake(limits.intake)

    # ---- the steps every request takes ----------------------------------------------------

    async def read(self, request: Request) -> _Asked:
        arrived_at = trio.current_time()
        json_content_type(request)
        with self.intake.admit() as holding:
            body = await read_body(request, self.limits.body, holding.take)
            entries = self.scheduler.models()
            document, (name, entry) = await self.intake.parse(body, partial(_named, entries))
        request.scope.setdefault("state", {})[MODEL_KEY] = entry.name
        return _Asked(body, document, name, entry, arrived_at)

    async def grant(self, request: Request, entry: ModelEntry) -> Grant | None:
        """A grant for ``entry``, or None when the client left while it waited (a grant
        that came as it left is ended at once)."""
        granted: Grant | None = None
        refused: FrontDoorRefused | None = None
        async with cancelled_when_gone(request.receive) as client:
            try:
                granted = await self.scheduler.acquire(entry.name)
            except FrontDoorRefused as error:
                refused = error
        if refused is not None:
            raise refused
        if granted is not None and client.gone:
            granted.done()
            return None
        return granted

    def pass_through(
        self, grant: Grant, dialect: Dialect, target: str, asked: _Asked, end: StreamEnd
    ) -> Response:
        body = _with_model(asked.body, asked.document, grant.upstream.served_model)
        outbound = Outbound("POST", target, body, JSON_HEADERS)
        echoed = asked.name if dialect is Dialect.OPENAI else None  # not the server's path
        return PassThrough(
            grant,
            dialect,
            self.clients,
            outbound,
            end=end,
            limits=self.limits.reply,
            model=echoed,
        )

    # ---- OpenAI and llama.cpp native ------------------------------------------------------

    async def openai(self, request: Request) -> Response:
        path = request.url.path
        asked = await self.read(request)
        if path == "/v1/rerank":
            _only_llama(asked.entry, path)
        grant = await self.grant(request, asked.entry)
        if grant is None:
            return Response(status_code=499)
        end = StreamEnd.OPENAI_DONE if "completions" in path else StreamEnd.ANY
        return self.pass_through(grant, Dialect.OPENAI, path, asked, end)

    async def llama(self, request: Request) -> Response:
        path = request.url.path
        asked = await self.read(request)
        _only_llama(asked.entry, path)
        grant = await self.grant(request, asked.entry)
        if grant is None:
            return Response(status_code=499)
        end = StreamEnd.LLAMA_STOP if path in ("/completion", "/infill") else StreamEnd.ANY
        return self.pass_through(grant, Dialect.LLAMACPP, path, asked, end)

    async def upstream(self, request: Request) -> Response:
        entries = self.scheduler.models()
        name = request.path_params["name"]
        entry = find_model(entries, name)
        if entry is None:
            raise unknown_model(entries, name)
        request.scope.setdefault("state", {})[MODEL_KEY] = entry.name
        with self.intake.admit() as holding:
            body = await read_body(request, self.limits.body, holding.take)
        grant = await self.grant(request, entry)
        if grant is None:
            return Response(status_code=499)
        target = "/" + request.path_params["rest"]
        if request.url.query:
            target += "?" + request.url.query
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _UPSTREAM_DROPPED}
        outbound = Outbound(request.method, target, body, headers)
        return PassThrough(
            grant,
            Dialect.LLAMACPP,
            self.clients,
            outbound,
            end=StreamEnd.ANY,
            limits=self.limits.reply,
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse(lists.openai_models(self.scheduler.models()))

    # ---- Ollama native --------------------------------------------------------------------

    async def ollama_generate(self, request: Request) -> Response:
        path = request.url.path
        asked = await self.read(request)
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._ollama_own(request, asked, path, StreamEnd.OLLAMA_DONE)
        shape: Kind = "chat" if path == "/api/chat" else "generate"
        flavor = asked.entry.flavor
        stream = _checked(ollama.wants_stream, asked.document)
        loading = ollama.is_load_request(asked.document)
        if loading:
            _no_unload(asked)
        elif shape == "chat":
            target, body = ollama.CHAT_PATH, _checked(ollama.chat_body, asked.document, "", flavor)
        else:
            target, body = _checked(ollama.generate_body, asked.document, "", flavor)
        grant = await self.grant(request, asked.entry)
        if grant is None:
            return Response(status_code=499)
        if loading:
            grant.done()
            return JSONResponse(load_reply(model=asked.name, created_at=_now(), kind=shape))
        return self._translated(grant, target, body, asked, shape, stream=stream)

    async def ollama_embed(self, request: Request) -> Response:
        asked = await self.read(request)
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._ollama_own(request, asked, "/api/embed", StreamEnd.ANY)
        body = _checked(ollama.embed_body, asked.document, "")
        grant = await self.grant(request, asked.entry)
        if grant is None:
            return Response(status_code=499)
        return self._translated(grant, ollama.EMBEDDINGS_PATH, body, asked, "embed", stream=False)

    async def _ollama_own(
        self, request: Request, asked: _Asked, path: str, end: StreamEnd
    ) -> Response:
        """An Ollama request for an Ollama instance: passed on as it is."""
        grant = await self.grant(request, asked.entry)
        if grant is None:
            return Response(status_code=499)
        return self.pass_through(grant, Dialect.OLLAMA, path, asked, end)

    def _translated(
        self,
        grant: Grant,
        target: str,
        body: dict[str, Any],
        asked: _Asked,
        shape: Shape,
        *,
        stream: bool,
    ) -> Response:
        served = grant.upstream.served_model
        if served:
            body = {"model": served, **body}
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return Translated(
            grant,
            self.clients,
            Outbound("POST", target, data, JSON_HEADERS),
            shape=shape,
            model=asked.name,
            stream=stream,
            arrived_at=asked.arrived_at,
            granted_at=trio.current_time(),
            limits=self.limits.reply,
        )

    async def ollama_show(self, request: Request) -> Response:
        asked = await self.read(request)
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._ollama_own(request, asked, "/api/show", StreamEnd.ANY)
        return JSONResponse(lists.ollama_show(asked.entry))

    async def ollama_tags(self, request: Request) -> Response:
        return JSONResponse(lists.ollama_tags(self.scheduler.models()))

    async def ollama_ps(self, request: Request) -> Response:
        return JSONResponse(lists.ollama_ps(self.scheduler.models()))

    async def ollama_version(self, request: Request) -> Response:
        return JSONResponse(lists.version())


def _named(entries: Sequence[ModelEntry], document: dict[str, Any]) -> tuple[str, ModelEntry]:
    """The model ``document`` names, and its entry (pure: run where the body is parsed).

    Raises:
        BadRequest: as `model_name`.
        FrontDoorRefused: 404, an unknown model.
    """
    name = model_name(document, model_list(entries))
    entry = find_model(entries, name)
    if entry is None:
        raise unknown_model(entries, name)
    return name, entry


def _now() -> str:
    return ollama_time(time.time())


def _checked(translate: Callable[..., _T], *args: Any) -> _T:
    """``translate(*args)``, its `InvalidConfig` (a field of the wrong type, ...) a 400."""
    try:
        return translate(*args)
    except InvalidConfig as error:
        raise BadRequest(str(error)) from None


def _only_llama(entry: ModelEntry, path: str) -> None:
    if entry.flavor is not InferFlavor.LLAMACPP:
        raise BadRequest(
            f"$.model: {entry.name!r} is served by {entry.flavor.id}, which has no {path}; "
            f"{path} is llama-server's own endpoint"
        )


def _no_unload(asked: _Asked) -> None:
    if asked.document.get("keep_alive") in (0, "0", "0s", "0m"):
        raise BadRequest(
            f"$.keep_alive: {asked.entry.name!r} is served by {asked.entry.flavor.id}: the "
            "front door's scheduler decides when it is unloaded (its idle TTL), not a request"
        )


def _with_model(body: bytes, document: dict[str, Any], served_model: str) -> bytes:
    """The body as the server must get it: its ``model`` the one the server expects (left
    out when that is empty); the client's bytes as they are when it already is."""
    if document.get("model") == served_model:
        return body
    changed = {k: v for k, v in document.items() if k != "model"}
    if served_model:
        changed = {"model": served_model, **changed}
    return json.dumps(changed, separators=(",", ":"), ensure_ascii=False).encode()


def front_door_app(
    scheduler: Scheduler,
    *,
    clients: UpstreamClients,
    limits: FrontDoorLimits = FrontDoorLimits(),
    api_key: str | None = None,
    metrics: FrontDoorMetrics | None = None,
    loopback_only: bool = True,
) -> ASGIApp:
    """The front door's ASGI app over ``scheduler`` (module docstring).

    Args:
        scheduler: grants each request an instance (``_actors/front_door_seam.py``).
        clients: the kept-alive clients to the servers (closed by the caller).
        limits: how much the front door reads from clients and servers.
        api_key: when given, every request must carry it as a bearer token.
        metrics: where requests are counted and timed (``front_door_metrics``), if anywhere.
        loopback_only: it listens on loopback only: a ``Host`` that is not loopback is
            refused (DNS rebinding). Requests from another site's web page (``Origin``,
            ``Sec-Fetch-Site``) are refused in any case (`RefuseBrowsers`).
    """
    door = _Door(scheduler, clients, limits)
    post = ["POST"]
    routes = [
        Route("/v1/chat/completions", door.openai, methods=post),
        Route("/v1/completions", door.openai, methods=post),
        Route("/v1/embeddings", door.openai, methods=post),
        Route("/v1/rerank", door.openai, methods=post),
        Route("/v1/models", door.models, methods=["GET"]),
        Route("/completion", door.llama, methods=post),
        Route("/infill", door.llama, methods=post),
        Route("/tokenize", door.llama, methods=post),
        Route("/detokenize", door.llama, methods=post),
        Route(
            "/upstream/{name}/{rest:path}",
            door.upstream,
            methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"],
        ),
        Route("/api/chat", door.ollama_generate, methods=post),
        Route("/api/generate", door.ollama_generate, methods=post),
        Route("/api/embed", door.ollama_embed, methods=post),
        Route("/api/show", door.ollama_show, methods=post),
        Route("/api/tags", door.ollama_tags, methods=["GET", "HEAD"]),
        Route("/api/ps", door.ollama_ps, methods=["GET", "HEAD"]),
        Route("/api/version", door.ollama_version, methods=["GET", "HEAD"]),
    ]
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    guarded = RefuseBrowsers(app, loopback_only=loopback_only)
    keyed: ASGIApp = guarded if api_key is None else RequireKey(guarded, api_key)
    return keyed if metrics is None else Measured(keyed, metrics, dialect_of)
