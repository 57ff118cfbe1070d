"""The steps every request of the front door takes, shared by its routes in each dialect
(``front_door_app``, ``front_door_ollama``): `DoorSteps.read` (the body, bounded, its JSON
and the model it names), `DoorSteps.answer` (the answer made with the scheduler's grant,
which ends that grant exactly once on every path) and `DoorSteps.pass_through` (the request
sent on as it is, its ``model`` the one the server expects)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import attrs
import trio
from starlette.requests import Request
from starlette.responses import Response

from .._actors.front_door_names import find_model, model_list, unknown_model
from .._actors.front_door_seam import Grant, ModelEntry, Scheduler
from .._edges.upstream import UpstreamClients
from .._errors import FrontDoorRefused
from .._policy.dialects import Dialect
from .._policy.stream_end import StreamEnd
from .._safe_json import dump_json
from .client_gone import cancelled_when_gone
from .front_door_body import BodyLimits, json_content_type, model_name, read_body
from .front_door_intake import Intake, IntakeLimits
from .front_door_metrics import MODEL_KEY
from .front_door_relay import GrantedAnswer, Outbound, PassThrough, ReplyLimits

JSON_HEADERS = {"Content-Type": "application/json"}


@attrs.frozen
class FrontDoorLimits:
    """What the front door reads from clients and servers (`BodyLimits`, `ReplyLimits`), and
    how many bodies at once (`IntakeLimits`)."""

    body: BodyLimits = BodyLimits()  # noqa: RUF009  (frozen value)
    reply: ReplyLimits = ReplyLimits()  # noqa: RUF009  (frozen value)
    intake: IntakeLimits = IntakeLimits()  # noqa: RUF009  (frozen value)


@attrs.frozen
class Asked:
    """One request read: its body, its JSON, the model entry it names, when it came."""

    body: bytes
    document: dict[str, Any]
    name: str
    entry: ModelEntry
    arrived_at: float


class DoorSteps:
    """The steps over one scheduler (module docstring)."""

    def __init__(self, scheduler: Scheduler, clients: UpstreamClients, limits: FrontDoorLimits):
        self.scheduler = scheduler
        self.clients = clients
        self.limits = limits
        self.intake = Intake(limits.intake)

    async def read(self, request: Request, *, old_field: str | None = None) -> Asked:
        """The request's body and the model it names (``old_field``: as `model_name`).

        Raises:
            BadRequest: as `read_body` and `model_name`.
            FrontDoorRefused: 404, an unknown model; 503, too many bodies at once.
        """
        arrived_at = trio.current_time()
        json_content_type(request)
        with self.intake.admit() as holding:
            body = await read_body(request, self.limits.body, holding.take)
            entries = self.scheduler.models()
            named = partial(_named, entries, old_field=old_field)
            document, (name, entry) = await self.intake.parse(body, named)
        request.scope.setdefault("state", {})[MODEL_KEY] = entry.name
        return Asked(body, document, name, entry, arrived_at)

    async def answer(
        self, request: Request, entry: ModelEntry, make: Callable[[Grant], Response]
    ) -> Response:
        """The answer ``make`` makes with a grant for ``entry``; the grant is ended exactly
        once whatever happens after it was given (design/front-door.md):

        - the client left while it waited: ended at once, a 499 (nothing is sent);
        - ``make`` raised (or the request was cancelled): ended, and the error goes on;
        - ``make`` gave a `GrantedAnswer` holding it: that answer ends it, once, when it has
          run (`GrantedAnswer.__call__`'s ``finally``);
        - ``make`` gave any other answer (one that needs no server): ended at once.

        Raises:
            FrontDoorRefused: the scheduler refused the request.
            Exception: what ``make`` raises.
        """
        grant = await self._acquire(request, entry)
        if grant is None:
            return Response(status_code=499)
        try:
            made = make(grant)
        except BaseException:
            grant.done()
            raise
        if not (isinstance(made, GrantedAnswer) and made.grant is grant):
            grant.done()
        return made

    async def _acquire(self, request: Request, entry: ModelEntry) -> Grant | None:
        """A grant for ``entry``, or None when the client left while it waited (a grant
        that came as it left, or as the request was cancelled, is ended at once)."""
        granted: Grant | None = None
        refused: FrontDoorRefused | None = None
        try:
            async with cancelled_when_gone(request.receive) as client:
                try:
                    granted = await self.scheduler.acquire(entry.name)
                except FrontDoorRefused as error:
                    refused = error
        except BaseException:
            if granted is not None:
                granted.done()
            raise
        if refused is not None:
            raise refused
        if granted is not None and client.gone:
            granted.done()
            return None
        return granted

    def pass_through(
        self, grant: Grant, dialect: Dialect, target: str, asked: Asked, end: StreamEnd
    ) -> Response:
        """The answer that sends ``asked`` on to ``target`` and its answer back as it is."""
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


def _named(
    entries: Sequence[ModelEntry], document: dict[str, Any], *, old_field: str | None
) -> tuple[str, ModelEntry]:
    """The model ``document`` names (``old_field``: as `model_name`), and its entry (pure:
    run where the body is parsed).

    Raises:
        BadRequest: as `model_name`.
        FrontDoorRefused: 404, an unknown model.
    """
    name = model_name(document, model_list(entries), old_field=old_field)
    entry = find_model(entries, name)
    if entry is None:
        raise unknown_model(entries, name)
    return name, entry


def _with_model(body: bytes, document: dict[str, Any], served_model: str) -> bytes:
    """The body as the server must get it: its ``model`` the one the server expects (left
    out when that is empty); the client's bytes as they are when it already is."""
    if document.get("model") == served_model:
        return body
    changed = {k: v for k, v in document.items() if k != "model"}
    if served_model:
        changed = {"model": served_model, **changed}
    return dump_json(changed)
