"""The front door's Ollama native routes (``/api/...``, and ``GET /``): passed on as they
are to Ollama instances, translated for llama-server and mlx_lm.server ones
(``front_door_translate``); ``front_door_app`` lists the routes and what each answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .._actors.front_door_seam import Grant
from .._errors import BadRequest, InvalidConfig
from .._flavor import InferFlavor
from .._policy import ollama_requests as ollama
from .._policy.dialects import Dialect
from .._policy.ollama_replies import Kind, load_reply, ollama_time
from .._policy.stream_end import StreamEnd
from .._safe_json import dump_json
from . import front_door_lists as lists
from .front_door_relay import Outbound
from .front_door_steps import JSON_HEADERS, Asked, DoorSteps
from .front_door_translate import Shape, Translated
from .json_answer import JsonAnswer

_T = TypeVar("_T")


class OllamaRoutes:
    """The Ollama route handlers over the shared steps (module docstring)."""

    def __init__(self, steps: DoorSteps) -> None:
        self.steps = steps

    async def generate(self, request: Request) -> Response:
        """``POST /api/chat`` and ``POST /api/generate`` (a load request too)."""
        path = request.url.path
        asked = await self.steps.read(request)
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._own(request, asked, path, StreamEnd.OLLAMA_DONE)
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
        if loading:  # the grant says it is loaded; the answer needs no server
            reply = JsonAnswer(load_reply(model=asked.name, created_at=_now(), kind=shape))
            return await self.steps.answer(request, asked.entry, lambda _: reply)
        return await self.steps.answer(
            request,
            asked.entry,
            lambda grant: self._translated(grant, target, body, asked, shape, stream=stream),
        )

    async def embed(self, request: Request) -> Response:
        """``POST /api/embed``."""
        asked = await self.steps.read(request)
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._own(request, asked, "/api/embed", StreamEnd.ANY)
        body = _checked(ollama.embed_body, asked.document, "")
        return await self.steps.answer(
            request,
            asked.entry,
            lambda grant: self._translated(
                grant, ollama.EMBEDDINGS_PATH, body, asked, "embed", stream=False
            ),
        )

    async def _own(self, request: Request, asked: Asked, path: str, end: StreamEnd) -> Response:
        """An Ollama request for an Ollama instance: passed on as it is."""
        steps = self.steps
        return await steps.answer(
            request,
            asked.entry,
            lambda grant: steps.pass_through(grant, Dialect.OLLAMA, path, asked, end),
        )

    def _translated(
        self,
        grant: Grant,
        target: str,
        body: dict[str, Any],
        asked: Asked,
        shape: Shape,
        *,
        stream: bool,
    ) -> Response:
        served = grant.upstream.served_model
        if served:
            body = {"model": served, **body}
        data = dump_json(body)
        return Translated(
            grant,
            self.steps.clients,
            Outbound("POST", target, data, JSON_HEADERS),
            shape=shape,
            model=asked.name,
            stream=stream,
            arrived_at=asked.arrived_at,
            granted_at=trio.current_time(),
            limits=self.steps.limits.reply,
        )

    async def show(self, request: Request) -> Response:
        """``POST /api/show``: the model in ``model``, or in the older ``name``."""
        asked = await self.steps.read(request, old_field="name")
        if asked.entry.flavor is InferFlavor.OLLAMA:
            return await self._own(request, asked, "/api/show", StreamEnd.ANY)
        return JsonAnswer(lists.ollama_show(asked.entry))

    async def tags(self, request: Request) -> Response:
        """``GET /api/tags``."""
        return JsonAnswer(lists.ollama_tags(self.steps.scheduler.models()))

    async def ps(self, request: Request) -> Response:
        """``GET /api/ps``."""
        return JsonAnswer(lists.ollama_ps(self.steps.scheduler.models()))

    async def version(self, request: Request) -> Response:
        """``GET /api/version``."""
        return JsonAnswer(lists.version())

    async def running(self, request: Request) -> Response:
        """``GET /`` and ``HEAD /``: Ollama's liveness answer."""
        return PlainTextResponse(lists.OLLAMA_RUNNING)


def _now() -> str:
    return ollama_time(time.time())


def _checked(translate: Callable[..., _T], *args: Any) -> _T:
    """``translate(*args)``, its `InvalidConfig` (a field of the wrong type, ...) a 400."""
    try:
        return translate(*args)
    except InvalidConfig as error:
        raise BadRequest(str(error)) from None


def _no_unload(asked: Asked) -> None:
    if asked.document.get("keep_alive") in (0, "0", "0s", "0m"):
        raise BadRequest(
            f"$.keep_alive: {asked.entry.name!r} is served by {asked.entry.flavor.id}: the "
            "front door's scheduler decides when it is unloaded (its idle TTL), not a request"
        )
