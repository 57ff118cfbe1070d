"""The Ollama actor's messages: what its workers post back to its loop (pure values; the
rules that apply them are ``step.py``), and `entry_for`, how a tag is found among them."""

from __future__ import annotations

from datetime import datetime

import attrs

from ..._errors import InferactorsError
from ..._policy.ollama_parse import LoadedModel, same_tag
from ..._policy.probe_report import Health, ServerReport, Unreachable
from ..._status import InstanceStatus
from ..messages import ReplyTo


@attrs.frozen
class Survey:
    """One look at the daemon.

    Attributes:
        health: ``GET /api/version``: Up, or Unreachable / Unhealthy with why.
        pulled: names ``/api/tags`` lists; None when that list could not be read.
        resident: ``/api/ps`` entries; None when that list could not be read.
        version: the daemon's version when it answered.
    """

    health: Health
    pulled: tuple[str, ...] | None = None
    resident: tuple[LoadedModel, ...] | None = None
    version: str | None = None

    @property
    def no_verdict(self) -> bool:
        """Whether it says nothing about the daemon: its deadline was lost to our own late
        loop (``_policy/lateness.py``)."""
        return isinstance(self.health, Unreachable) and self.health.overloaded

    def report(self) -> ServerReport:
        """The survey as a `ServerReport` (what ``InferRuntime.health`` answers)."""
        loaded = tuple(entry.name for entry in self.resident or ())
        return ServerReport(self.health, self.pulled or (), loaded, self.version)


@attrs.frozen
class Surveyed:
    """A survey for a status request (``reply``) or for nobody."""

    survey: Survey
    reply: ReplyTo[InstanceStatus] | None


@attrs.frozen
class Checked:
    """Start ``attempt`` read ``/api/tags`` and ``/api/ps``: ``entry`` is the model's
    (None: not resident), ``cloud`` the remote host of a cloud model (never loaded by us),
    or ``error`` says why the lists could not be read."""

    attempt: int
    entry: LoadedModel | None
    error: InferactorsError | None = None
    cloud: str | None = None


@attrs.define
class LoadTicket:
    """Set by the load worker the moment Ollama answers our load with HTTP 200, before the
    worker yields again: from then on the model is one we brought in, and owes its unload,
    even if a stop cancels the worker before it can post `Loaded`."""

    answered: bool = False


@attrs.frozen
class Loaded:
    """The load of ``attempt`` returned: ``entry`` is ``/api/ps``'s entry read right after
    (None: not listed), or ``error`` is why the load failed."""

    attempt: int
    entry: LoadedModel | None
    error: InferactorsError | None = None


@attrs.frozen
class Watched:
    """The periodic ``/api/ps`` look of ``attempt`` (the Ollama instance's probe).

    Attributes:
        attempt: the start it belongs to.
        resident: the entries; None when unreadable.
        latency_s: float seconds the request took (for `Edges.on_probe`); None: not timed.
        wall: the calendar time (aware) the look was made, to tell a keep_alive that ran out
            from an unload by another client; None: unknown.
    """

    attempt: int
    resident: tuple[LoadedModel, ...] | None
    latency_s: float | None = None
    wall: datetime | None = None


@attrs.frozen
class Unloaded:
    """The one unload was sent: ``gone`` says whether ``/api/ps`` dropped the model within
    ``deadline_s`` float seconds; ``error`` is why the unload request failed."""

    gone: bool
    deadline_s: float
    error: InferactorsError | None = None


@attrs.frozen
class Closed:
    """The instance's unload finished its cleanup; the actor ends after answering."""

    reply: ReplyTo[None]


OllamaInternal = Surveyed | Checked | Loaded | Watched | Unloaded | Closed
"""What the workers post back."""


def entry_for(resident: tuple[LoadedModel, ...], tag: str) -> LoadedModel | None:
    """The ``/api/ps`` entry of ``tag`` (`same_tag` on ``name`` or ``model``), or None."""
    for entry in resident:
        if same_tag(tag, entry.name) or same_tag(tag, entry.model):
            return entry
    return None
