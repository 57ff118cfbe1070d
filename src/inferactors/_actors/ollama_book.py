"""The bookkeeping of a managed Ollama instance and how it becomes a status (pure; no I/O).

`OllamaBook` holds what one Ollama actor (``ollama_actor.py``) knows; the actor is its only
writer. `ollama_status` says where a load is, and also a lingering unload, a lost
ownership or a model unloaded by someone else, and who loaded the model.
"""

from __future__ import annotations

import enum
from datetime import datetime

import attrs

from .._errors import InferactorsError
from .._policy.admission import Plan
from .._policy.ollama_parse import ExpiryWatch, LoadedModel, OllamaLoadTimeout, same_tag
from .._policy.probe_parse import ServerReport, Up
from .._policy.status import map_report
from .._status import InstanceState, InstanceStatus
from .ollama_work import Survey, entry_for


class Phase(enum.Enum):
    """Where the instance is in its start/stop cycle."""

    IDLE = "idle"  # loaded, never started
    CHECKING = "checking"  # start: reading /api/ps before loading
    LOADING = "loading"  # our load request is open
    READY = "ready"  # the model is resident (ours or theirs)
    FAILED = "failed"  # our load failed; a new start may try again
    STOPPING = "stopping"  # the one unload is on its way
    STOPPED = "stopped"


class Owner(enum.Enum):
    """Who loaded the model: us, or someone else before we looked."""

    OURS = "ours"
    THEIRS = "theirs"


@attrs.define
class OllamaBook:
    """What one Ollama actor knows (pure; the actor is its only writer).

    ``attempt`` numbers starts and stops, so a worker's result from an earlier start is
    recognised and dropped. ``unload_owed`` is set when we ask for a load and cleared by the
    one unload, which therefore happens at most once per load.
    """

    tag: str
    phase: Phase = Phase.IDLE
    attempt: int = 0
    wanted: bool = False
    owner: Owner | None = None
    unload_owed: bool = False
    failure: str | None = None
    survey: Survey | None = None
    resident: bool | None = None
    watch: ExpiryWatch | None = None
    watch_from: float = 0.0
    lost: str | None = None
    lingering: str | None = None
    stop_note: str | None = None
    supervision: str | None = None
    restarts: int = 0

    def begin_start(self) -> int:
        """A start was accepted: a new attempt, reading ``/api/ps`` first."""
        self.attempt += 1
        self.phase, self.wanted, self.owner = Phase.CHECKING, True, None
        self.failure = self.lost = self.stop_note = None
        self.watch = None
        return self.attempt

    def fail_check(self, error: InferactorsError | None, cloud: str | None) -> None:
        """The start's look found a cloud model (``cloud``: its remote host; never loaded
        by us) or could not read the lists (``error``): the start failed."""
        self.phase = Phase.FAILED
        if cloud is not None:
            self.failure = (
                f"{self.tag} is an ollama cloud model (it runs on {cloud}); inferactors never "
                "loads or unloads a cloud model: adopt it instead"
            )
        else:
            self.failure = f"cannot tell whether {self.tag} is resident: {error}"

    def begin_stop(self) -> bool:
        """A stop was accepted: drop in-flight results; True when the unload is owed now."""
        self.attempt += 1
        self.wanted, self.watch = False, None
        owed, self.unload_owed = self.unload_owed, False
        self.phase = Phase.STOPPING if owed else Phase.STOPPED
        if not owed:
            self.stop_note = _left_note(self.owner)
        return owed

    def saw(self, resident: tuple[LoadedModel, ...], now: float) -> None:
        """A fresh ``/api/ps``: is our model there, and did its expiry move?"""
        entry = entry_for(resident, self.tag)
        self.resident = entry is not None
        if entry is None:
            self.lingering = None
        if self.watch is None or self.phase is not Phase.READY or self.lost is not None:
            return
        self.watch, verdict = self.watch.observe(entry, now - self.watch_from)
        if verdict == "changed":
            self.lost = (
                f"ownership lost: another client changed the keep_alive of {self.tag} "
                f"(expires_at {_when(entry)}, ours was {_when_value(self.watch.last)}); "
                "inferactors does not re-pin it"
            )


def ollama_status(book: OllamaBook) -> InstanceStatus:
    """The status of a managed Ollama instance: Loaded, then Degraded "loading model", then
    Running "model resident"; a failed load is Degraded "load failed: ..."; an unpulled tag,
    a daemon that does not answer, a lingering unload and a lost ownership are reported as
    such."""
    status = _status_without_notes(book)
    return attrs.evolve(status, restarts=book.restarts, supervision=book.supervision)


def _status_without_notes(book: OllamaBook) -> InstanceStatus:
    tag, survey = book.tag, book.survey
    if book.phase in (Phase.CHECKING, Phase.LOADING):
        return InstanceStatus(InstanceState.DEGRADED, "loading model")
    if survey is not None and not isinstance(survey.health, Up):
        return map_report(ServerReport(survey.health), model=None, alive=False, adopted=False)
    if survey is not None and survey.pulled is not None and not _pulled(survey, tag):
        return InstanceStatus(InstanceState.DEGRADED, f"model {tag} is not pulled")
    if book.phase is Phase.FAILED:
        return InstanceStatus(InstanceState.DEGRADED, f"load failed: {book.failure}")
    if book.lingering is not None:
        return InstanceStatus(InstanceState.DEGRADED, book.lingering)
    if book.phase is Phase.READY:
        return _ready_status(book)
    return _idle_status(book)


def _ready_status(book: OllamaBook) -> InstanceStatus:
    if book.lost is not None:
        return InstanceStatus(InstanceState.DEGRADED, book.lost)
    if book.resident is False:
        who = "us" if book.owner is Owner.OURS else "someone else"
        detail = (
            f"model {book.tag} is no longer resident (it was loaded by {who}); "
            "inferactors does not reload it"
        )
        return InstanceStatus(InstanceState.DEGRADED, detail)
    if book.owner is Owner.THEIRS:
        detail = "model resident (loaded by someone else; inferactors never unloads it)"
        return InstanceStatus(InstanceState.RUNNING, detail)
    return InstanceStatus(InstanceState.RUNNING, "model resident")


def _idle_status(book: OllamaBook) -> InstanceStatus:
    if book.phase is Phase.STOPPING:
        return InstanceStatus(InstanceState.DEGRADED, f"unloading model {book.tag}")
    if book.stop_note is not None:
        return InstanceStatus(InstanceState.LOADED, book.stop_note)
    if book.resident is None:
        return InstanceStatus(InstanceState.LOADED)
    if book.resident:
        return InstanceStatus(InstanceState.LOADED, "model resident (loaded by someone else)")
    return InstanceStatus(InstanceState.LOADED, "model not resident")


def _pulled(survey: Survey, tag: str) -> bool:
    return any(same_tag(tag, name) for name in survey.pulled or ())


def _left_note(owner: Owner | None) -> str:
    if owner is Owner.THEIRS:
        return "stopped; the model stays resident (loaded by someone else)"
    return "stopped on request"


def _when(entry: LoadedModel | None) -> str:
    return _when_value(entry.expires_at) if entry is not None else "none"


def _when_value(value: datetime | str | None) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def load_failure(error: InferactorsError) -> str:
    """The words after "load failed: " for a load error: a runner or request timeout reads
    "load timeout: ...", anything else its message."""
    if isinstance(error, OllamaLoadTimeout):
        return f"load timeout: {error}"
    return str(error) or type(error).__name__


def ollama_tag_of(plan: Plan) -> str:
    """The tag Ollama knows the plan's model by: the manifest's ``ollama_tag``, else the
    registry name, else the spec's model."""
    if plan.model is not None:
        return plan.model.ollama_tag
    return plan.spec.model or ""
