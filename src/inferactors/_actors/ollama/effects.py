"""What the Ollama actor's rules ask its loop to do: frozen values (``step.py`` returns them,
``actor.py`` carries them out in order; pure)."""

from __future__ import annotations

from typing import Any

import attrs

from ..._errors import InferactorsError
from ..messages import ReplyTo


@attrs.frozen
class Answer:
    """Answer ``reply`` with ``value`` (`messages.answer`)."""

    reply: ReplyTo[Any]
    value: object


@attrs.frozen
class Refuse:
    """Answer ``reply`` with ``error`` (`messages.refuse`)."""

    reply: ReplyTo[Any]
    error: InferactorsError


@attrs.frozen
class Publish:
    """Publish the status now (before an answer that must agree with the events)."""


@attrs.frozen
class Check:
    """Start the worker that reads ``/api/tags`` and ``/api/ps`` before a load
    (`OllamaWork.check`); it posts `Checked`."""

    attempt: int
    lingering: bool


@attrs.frozen
class StartLoad:
    """Start the load worker (`OllamaWork.load`) with a fresh cancel scope and `LoadTicket`;
    it posts `Loaded`."""

    attempt: int


@attrs.frozen
class EndLoad:
    """Forget the load in flight (its ticket was read); ``cancel``: cancel it too."""

    cancel: bool


@attrs.frozen
class StartWatch:
    """Start the ownership watch of our resident model (`OllamaWork.watch`)."""

    attempt: int


@attrs.frozen
class EndWatch:
    """Cancel and forget the ownership watch."""


@attrs.frozen
class NoteProbeTime:
    """Tell the edges how long a probe (a watch's ``/api/ps`` look) took (`Edges.on_probe`),
    ``latency_s`` float seconds, at trio time ``at``."""

    latency_s: float
    at: float


@attrs.frozen
class Unload:
    """Start the unload worker (`OllamaWork.unload`): the one unload we owe, then
    ``/api/ps`` polled for ``deadline_s`` float seconds; it posts `Unloaded`."""

    deadline_s: float


@attrs.frozen
class SurveyFor:
    """Start a survey of the daemon (`OllamaWork.survey_for`) that answers ``reply``."""

    reply: ReplyTo[Any]


@attrs.frozen
class CheckHealth:
    """Start a worker that answers ``reply`` with one probe report."""

    reply: ReplyTo[Any]


@attrs.frozen
class CheckDeepHealth:
    """Start a worker that asks for one real token and answers ``reply``."""

    reply: ReplyTo[Any]


@attrs.frozen
class CloseDown:
    """Start the close worker (`OllamaWork.close`): the unload we owe when ``owed``, the
    instance directory removed; it posts `Closed`."""

    owed: bool
    reply: ReplyTo[None]


@attrs.frozen
class EndActor:
    """End the actor's loop (`Mailbox.close`)."""


Effect = (
    Answer
    | Refuse
    | Publish
    | Check
    | StartLoad
    | EndLoad
    | StartWatch
    | EndWatch
    | NoteProbeTime
    | Unload
    | SurveyFor
    | CheckHealth
    | CheckDeepHealth
    | CloseDown
    | EndActor
)
