"""What one managed Ollama actor knows: a frozen `OllamaState` (pure; no trio, no I/O).

`step` (``step.py``) is the only function that makes a new one, and the actor (``actor.py``)
the only holder of the current one. Every field says when it is set and when it is cleared.
How it reads as a status is ``status.py``.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

import attrs

from ..._errors import InferactorsError
from ..._policy.admission import Plan
from ..._policy.ollama_parse import ExpiryWatch, LoadedModel
from ..messages import ReplyTo
from .messages import Survey, entry_for


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


@attrs.frozen
class OllamaState:
    """Everything one Ollama actor knows about its instance.

    ``attempt`` numbers starts and stops, so a worker's result from an earlier start is
    recognised and dropped. ``unload_owed`` is set when Ollama answered our load and cleared
    by the one unload, which therefore happens at most once per load.
    """

    instance_id: str
    runtime_id: str
    tag: str
    """The model's Ollama tag: what is loaded, unloaded and asked for a token."""
    phase: Phase = Phase.IDLE
    """Where the start/stop cycle is: set by each start, look, load, stop and unload."""
    attempt: int = 0
    """Raised by each start and stop; a worker's result of an earlier attempt is dropped."""
    wanted: bool = False
    """Set by a start; cleared by a stop, an unload or a crash."""
    owner: Owner | None = None
    """Who loaded the model: set when a start finds it resident (theirs) or we load it
    (ours); cleared by a start, and by a failed load that owes nothing."""
    unload_owed: bool = False
    """Set once Ollama answered our load with 200 (`LoadTicket`), even if the load worker
    was cancelled after; cleared by the one unload (a stop, the unload, the teardown)."""
    failure: str | None = None
    """Why the last start failed; cleared by the next start."""
    survey: Survey | None = None
    """The last survey of the daemon (a status request's); replaced by each."""
    resident: bool | None = None
    """Whether ``/api/ps`` lists the model: set by each look; None before the first."""
    watch: ExpiryWatch | None = None
    """Our loaded model's expiry, watched for a foreign client's change: set when our load
    is resident; cleared by a start and a stop."""
    watch_from: float = 0.0
    """Trio time `watch` began."""
    last_entry: LoadedModel | None = None
    """The model's ``/api/ps`` entry at the last look that listed it: set by each such look;
    cleared by a start."""
    evicted: str | None = None
    """Ollama unloaded the model while it was ready (its keep_alive ran out, or another
    client unloaded it), in those words: set by the first look that misses it; cleared by
    the next start."""
    lost: str | None = None
    """Ownership lost (another client changed the keep_alive): set by a look; cleared by
    the next start."""
    lingering: str | None = None
    """Our unload did not take within its deadline: set then; cleared when ``/api/ps`` no
    longer lists the model, or a start's look finds it gone."""
    stop_note: str | None = None
    """How the last stop (or crash) ended; cleared by the next start."""
    supervision: str | None = None
    """The supervisor's note; set by `Annotate`."""
    restarts: int = 0
    """Restarts the supervisor counted; set by `Annotate`."""
    loading: bool = False
    """A load worker is in flight (its `LoadTicket` may already say Ollama answered): set
    when the load is sent; cleared when it returns, by a stop, an unload or a crash."""
    watching: bool = False
    """The ownership watch runs: set when the model is resident; cleared by a stop, an
    unload or a crash."""
    stop_callers: tuple[ReplyTo[Any], ...] = ()
    """Callers of the stop under way (its unload); answered at `Unloaded`."""
    crash_note: str | None = None
    """A crash's words, for the unload it started; cleared at `Unloaded`."""
    closing: bool = False
    """Set by `Shutdown` (the unload): every later command is refused; never cleared."""

    def settled(self, answered: bool) -> OllamaState:
        """The load in flight, if any, is over: it owes its unload when Ollama had answered
        it (``answered``: its `LoadTicket`)."""
        if not self.loading:
            return self
        return attrs.evolve(self, loading=False, unload_owed=self.unload_owed or answered)

    def begin_start(self) -> OllamaState:
        """A start was accepted: a new attempt, reading ``/api/ps`` first."""
        return attrs.evolve(
            self,
            attempt=self.attempt + 1,
            phase=Phase.CHECKING,
            wanted=True,
            owner=None,
            failure=None,
            lost=None,
            stop_note=None,
            watch=None,
            last_entry=None,
            evicted=None,
        )

    def fail_check(self, error: InferactorsError | None, cloud: str | None) -> OllamaState:
        """The start's look found a cloud model (``cloud``: its remote host; never loaded
        by us) or could not read the lists (``error``): the start failed."""
        if cloud is not None:
            failure = (
                f"{self.tag} is an ollama cloud model (it runs on {cloud}); inferactors never "
                "loads or unloads a cloud model: adopt it instead"
            )
        else:
            failure = f"cannot tell whether {self.tag} is resident: {error}"
        return attrs.evolve(self, phase=Phase.FAILED, failure=failure)

    def begin_stop(self) -> tuple[OllamaState, bool]:
        """A stop was accepted: drop in-flight results; True when the unload is owed now."""
        owed = self.unload_owed
        state = attrs.evolve(
            self,
            attempt=self.attempt + 1,
            wanted=False,
            watch=None,
            unload_owed=False,
            phase=Phase.STOPPING if owed else Phase.STOPPED,
        )
        if not owed:
            state = attrs.evolve(state, stop_note=_left_note(self.owner))
        return state, owed

    def saw(
        self, resident: tuple[LoadedModel, ...], now: float, wall: datetime | None = None
    ) -> OllamaState:
        """A fresh ``/api/ps`` at trio time ``now`` (calendar time ``wall`` when known): is
        our model there, did its expiry move, and if it left while ready, why?"""
        entry = entry_for(resident, self.tag)
        state = attrs.evolve(self, resident=entry is not None)
        if entry is None:
            state = attrs.evolve(state, lingering=None)
            if self.phase is Phase.READY and self.resident and self.evicted is None:
                state = attrs.evolve(state, evicted=_eviction(self, wall))
        else:
            state = attrs.evolve(state, last_entry=entry)
        if state.watch is None or state.phase is not Phase.READY or state.lost is not None:
            return state
        if entry is None:
            return state
        watch, verdict = state.watch.observe(entry, now - state.watch_from)
        state = attrs.evolve(state, watch=watch)
        if verdict == "changed":
            lost = (
                f"ownership lost: another client changed the keep_alive of {self.tag} "
                f"(expires_at {_when(entry)}, ours was {_when_value(watch.last)}); "
                "inferactors does not re-pin it"
            )
            state = attrs.evolve(state, lost=lost)
        return state


EXPIRY_SLACK_S = 0.5
"""Float seconds before ``expires_at`` within which a model found gone is taken to have been
unloaded by its keep_alive (clocks and Ollama's own timer are not exact)."""


def _eviction(state: OllamaState, wall: datetime | None) -> str:
    """Why the model left ``/api/ps`` while ready, in Ollama's terms: its keep_alive ran out
    (``expires_at`` passed by the look's calendar time ``wall``), or it was unloaded before
    then (another client's keep_alive 0, or Ollama making room for another model)."""
    who = "us" if state.owner is Owner.OURS else "someone else"
    tail = f"(it was loaded by {who}); inferactors does not reload it"
    expires = state.last_entry.expires_at if state.last_entry is not None else None
    if not isinstance(expires, datetime) or wall is None:
        return f"model {state.tag} is no longer resident in /api/ps {tail}"
    shown = expires.isoformat()
    if wall >= expires - timedelta(seconds=EXPIRY_SLACK_S):
        return f"model {state.tag} unloaded by ollama: its keep_alive ran out at {shown} {tail}"
    return (
        f"model {state.tag} unloaded before its keep_alive ran out (expires_at {shown}): "
        f"another client unloaded it or ollama made room for another model {tail}"
    )


def _left_note(owner: Owner | None) -> str:
    if owner is Owner.THEIRS:
        return "stopped; the model stays resident (loaded by someone else)"
    return "stopped on request"


def _when(entry: LoadedModel | None) -> str:
    return _when_value(entry.expires_at) if entry is not None else "none"


def _when_value(value: datetime | str | None) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def ollama_tag_of(plan: Plan) -> str:
    """The tag Ollama knows the plan's model by: the manifest's ``ollama_tag``, else the
    registry name, else the spec's model."""
    if plan.model is not None:
        return plan.model.ollama_tag
    return plan.spec.model or ""
