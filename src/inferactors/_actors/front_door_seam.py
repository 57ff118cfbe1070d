"""The seam between the front door's HTTP side and its scheduler (pure types; no I/O).

The front door is one loopback HTTP address that serves every instance of a run
(``_service/``: the ASGI app, its dialects, the streaming pass-through). For each request
it asks a `Scheduler` for the instance that serves the model the request names; the
scheduler (``_actors/``: residency ledger, typed admission, on-demand starts, idle TTL,
eviction, bounded queues) answers with a `Grant` once that instance is Running, or refuses
with a `FrontDoorRefused` that says why, how the client should see it (HTTP status) and
whether a retry can help (``retry_after_s``).

The HTTP side calls `Grant.done` exactly once per grant: at the last byte of the response
(the last chunk of a stream), at the client's disconnect, or when the upstream failed.
Until then the request counts as in flight, and no TTL, eviction or stop cuts it short.

Shapes only: the two halves are built against this module and meet here.
"""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from .._errors import FrontDoorRefused as FrontDoorRefused
from .._errors import RefusalKind as RefusalKind
from .._flavor import InferFlavor


class Residency(enum.StrEnum):
    """Where an instance stands, as `/v1/models`, `/api/tags` and `/api/ps` report it."""

    RESIDENT = "resident"
    """Running: its deep health passed; requests go straight to it."""
    STARTING = "starting"
    """A start is under way (on demand or preload); requests for it wait for that start."""
    STOPPING = "stopping"
    """Draining or stopping (TTL, eviction, operator, reload); new requests wait or start it
    again once it has stopped."""
    NOT_LOADED = "not-loaded"
    """Not running; an on-demand instance is started by the first request for it."""


@attrs.frozen
class Upstream:
    """Where one granted request goes.

    Attributes:
        role: the instance's role (its name in the run file).
        flavor: which server serves it.
        base_url: ``http://127.0.0.1:PORT`` (``[::1]`` when the server binds there).
        served_model: the name the server itself expects in a request's ``"model"`` field
            (an mlx_lm.server wants its ``--model`` path or ``"default_model"``; Ollama its
            own tag; llama-server accepts anything but lists its ``--alias``).
        api_key: the bearer token the server needs (``serve.api_key_file``), None when none.
    """

    role: str
    flavor: InferFlavor
    base_url: str
    served_model: str
    api_key: str | None = attrs.field(default=None, repr=False)


@attrs.frozen
class ModelEntry:
    """One model the front door serves, as its model lists report it.

    Attributes:
        name: the instance's role: the primary name clients use.
        aliases: the other names that route to it (the registry model name, the server's
            ``--alias``, Ollama's normalised names), without ``name``.
        flavor: which server serves it.
        residency: where it stands now.
        on_demand: whether a request may start it (False: it runs only when the run file
            or an operator starts it).
    """

    name: str
    aliases: tuple[str, ...]
    flavor: InferFlavor
    residency: Residency
    on_demand: bool


class Grant(Protocol):
    """Permission to send one request to one Running instance."""

    @property
    def upstream(self) -> Upstream:
        """Where the request goes."""
        ...

    def done(self) -> None:
        """The request is over (last byte sent, client gone, or upstream failed). Called
        exactly once; later calls do nothing. Never blocks, never raises."""
        ...

    def cut_by(self) -> str | None:
        """Why the instance was stopped while this request was still in flight (a stop
        whose drain ran out before the request ended), in words the client is told
        (``"the instance was stopped by an operator before this answer ended (drain timed
        out)"``); None while no stop cut it. The HTTP side asks when the server's answer
        breaks, so the client hears the stop, not what the broken connection looked like.
        Never blocks, never raises."""
        ...


class Scheduler(Protocol):
    """What the front door's HTTP side needs from the scheduler."""

    def models(self) -> tuple[ModelEntry, ...]:
        """Every model the front door serves, in the run file's order; no I/O."""
        ...

    async def acquire(self, model: str) -> Grant:
        """Wait (bounded) until the instance serving ``model`` is Running and may take one
        more request, starting it on demand (and evicting idle instances) when needed.

        Cancellation (the client went away) withdraws only this request from the queue.

        Raises:
            FrontDoorRefused: unknown model, queue full, waited too long, concurrency limit,
                can never fit, memory not recovered, or its start failed (in the server's
                own words).
        """
        ...
