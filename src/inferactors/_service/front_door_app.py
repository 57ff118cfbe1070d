"""The front door's ASGI app: one address for every model of a run, in three dialects.

Routes (each request names its model in its body's ``"model"``, or in the path for
``/upstream/NAME/...``; an unknown model is a 404 naming the models there are):

- OpenAI, every flavor: ``POST /v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings``, ``/v1/rerank`` (llama-server only: its ``--reranking``), ``GET
  /v1/models``, and ``GET /v1/models/{id}`` (OpenAI's retrieve: that model's entry of the
  list, found by any name that routes to it; a 404 naming it otherwise).
- llama.cpp native, llama-server instances: ``POST /completion``, ``/infill``,
  ``/tokenize``, ``/detokenize``; and ``/upstream/NAME/PATH`` (any method): the request
  passed on as it is to ``PATH`` on the server of model NAME (``/upstream/chat/props``).
- Ollama native: ``POST /api/chat``, ``/api/generate``, ``/api/embed``, ``/api/show``,
  ``GET /api/tags``, ``/api/ps``, ``/api/version``: passed on to Ollama instances, and
  translated for llama-server and mlx_lm.server ones (``front_door_translate``).
  ``/api/show`` also takes the model in the older ``name`` field when ``model`` is missing
  or empty, as Ollama does (its other endpoints here read ``model`` only, as Ollama's do).
  ``GET /`` and ``HEAD /`` answer 200 ``Ollama is running`` (``text/plain``), Ollama's
  liveness answer, which tools check before they use an Ollama address (``GET
  /api/version`` says it is inferactors, with its version).
  A load request (``/api/generate`` or ``/api/chat`` without prompt or messages) for a
  translated model answers ``done_reason`` ``"load"`` once the instance is granted; one
  with ``"keep_alive": 0`` (unload) is refused with 400: residency there is the front
  door scheduler's (its idle TTL), not a client's.

Each request is read (`front_door_body`), granted by the `Scheduler`
(``_actors/front_door_seam.py``; a client that leaves while it waits withdraws), and
answered by a `GrantedAnswer` (``front_door_relay``), which ends the grant exactly once:
the steps every route shares are ``front_door_steps``; the Ollama routes are
``front_door_ollama``.
Errors come in the dialect of the route (`inferactors._policy.dialects`): an unknown
route or method too, and anything unforeseen (500, naming the exception's type and words).
With an API key, every request must carry ``Authorization: Bearer <key>`` (401 in the
dialect otherwise; compared in constant time). A request a web page sent is refused
with 403 before anything starts (``_policy/browser_guard.py``): another site's ``Origin``
or ``Sec-Fetch-Site``, and on loopback a ``Host`` that is not loopback (DNS rebinding).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .._actors.front_door_names import find_model, unknown_model
from .._actors.front_door_seam import ModelEntry, Scheduler
from .._edges.upstream import UpstreamClients
from .._errors import BadRequest
from .._flavor import InferFlavor
from .._policy.dialects import Dialect
from .._policy.stream_end import StreamEnd
from . import front_door_lists as lists
from .front_door_body import read_body
from .front_door_errors import EXCEPTION_HANDLERS, RefuseBrowsers, RequireKey, dialect_of
from .front_door_metrics import MODEL_KEY, FrontDoorMetrics, Measured
from .front_door_ollama import OllamaRoutes
from .front_door_relay import Outbound, PassThrough
from .front_door_steps import DoorSteps
from .front_door_steps import FrontDoorLimits as FrontDoorLimits
from .json_answer import JsonAnswer

_UPSTREAM_DROPPED = frozenset(
    {"host", "authorization", "content-length", "connection", "keep-alive", "te",
     "transfer-encoding", "upgrade", "accept-encoding", "proxy-authorization"}
)  # fmt: skip


class _OpenAIRoutes:
    """The OpenAI and llama.cpp native route handlers over the shared steps."""

    def __init__(self, steps: DoorSteps) -> None:
        self.steps = steps

    async def openai(self, request: Request) -> Response:
        path = request.url.path
        asked = await self.steps.read(request)
        if path == "/v1/rerank":
            _only_llama(asked.entry, path)
        end = StreamEnd.OPENAI_DONE if "completions" in path else StreamEnd.ANY
        steps = self.steps
        return await steps.answer(
            request,
            asked.entry,
            lambda grant: steps.pass_through(grant, Dialect.OPENAI, path, asked, end),
        )

    async def llama(self, request: Request) -> Response:
        path = request.url.path
        asked = await self.steps.read(request)
        _only_llama(asked.entry, path)
        end = StreamEnd.LLAMA_STOP if path in ("/completion", "/infill") else StreamEnd.ANY
        steps = self.steps
        return await steps.answer(
            request,
            asked.entry,
            lambda grant: steps.pass_through(grant, Dialect.LLAMACPP, path, asked, end),
        )

    async def upstream(self, request: Request) -> Response:
        steps = self.steps
        entries = steps.scheduler.models()
        name = request.path_params["name"]
        entry = find_model(entries, name)
        if entry is None:
            raise unknown_model(entries, name)
        request.scope.setdefault("state", {})[MODEL_KEY] = entry.name
        with steps.intake.admit() as holding:
            body = await read_body(request, steps.limits.body, holding.take)
        target = "/" + request.path_params["rest"]
        if request.url.query:
            target += "?" + request.url.query
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _UPSTREAM_DROPPED}
        outbound = Outbound(request.method, target, body, headers)
        return await steps.answer(
            request,
            entry,
            lambda grant: PassThrough(
                grant,
                Dialect.LLAMACPP,
                steps.clients,
                outbound,
                end=StreamEnd.ANY,
                limits=steps.limits.reply,
            ),
        )

    async def models(self, request: Request) -> Response:
        return JsonAnswer(lists.openai_models(self.steps.scheduler.models()))

    async def model(self, request: Request) -> Response:
        entries = self.steps.scheduler.models()
        name = request.path_params["model"]
        entry = find_model(entries, name)
        if entry is None:
            raise unknown_model(entries, name)
        return JsonAnswer(lists.openai_model(entry))


def _only_llama(entry: ModelEntry, path: str) -> None:
    if entry.flavor is not InferFlavor.LLAMACPP:
        raise BadRequest(
            f"$.model: {entry.name!r} is served by {entry.flavor.id}, which has no {path}; "
            f"{path} is llama-server's own endpoint"
        )


def front_door_app(
    scheduler: Scheduler,
    *,
    clients: UpstreamClients,
    limits: FrontDoorLimits = FrontDoorLimits(),  # noqa: B008  (frozen value)
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
    steps = DoorSteps(scheduler, clients, limits)
    door, ollama = _OpenAIRoutes(steps), OllamaRoutes(steps)
    post = ["POST"]
    routes = [
        Route("/v1/chat/completions", door.openai, methods=post),
        Route("/v1/completions", door.openai, methods=post),
        Route("/v1/embeddings", door.openai, methods=post),
        Route("/v1/rerank", door.openai, methods=post),
        Route("/v1/models", door.models, methods=["GET"]),
        Route("/v1/models/{model:path}", door.model, methods=["GET"]),
        Route("/completion", door.llama, methods=post),
        Route("/infill", door.llama, methods=post),
        Route("/tokenize", door.llama, methods=post),
        Route("/detokenize", door.llama, methods=post),
        Route(
            "/upstream/{name}/{rest:path}",
            door.upstream,
            methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"],
        ),
        Route("/api/chat", ollama.generate, methods=post),
        Route("/api/generate", ollama.generate, methods=post),
        Route("/api/embed", ollama.embed, methods=post),
        Route("/api/show", ollama.show, methods=post),
        Route("/api/tags", ollama.tags, methods=["GET", "HEAD"]),
        Route("/api/ps", ollama.ps, methods=["GET", "HEAD"]),
        Route("/api/version", ollama.version, methods=["GET", "HEAD"]),
        Route("/", ollama.running, methods=["GET", "HEAD"]),
    ]
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    guarded = RefuseBrowsers(app, loopback_only=loopback_only)
    keyed: ASGIApp = guarded if api_key is None else RequireKey(guarded, api_key)
    return keyed if metrics is None else Measured(keyed, metrics, dialect_of)
