"""Every decision of the managed Ollama actor: ``step(state, message, now, seen)`` (pure; no
trio, no I/O), as the instance actor's (``_actors/instance/step.py``).

The rules, in the order they win:

* A closing (unloading) instance refuses every command; results are still applied.
* Start: one in flight (a start meanwhile joins it: answered at once, the load under way
  is the outcome); refused while the model is ready or our unload is under way. It reads
  ``/api/tags`` and ``/api/ps`` first: a cloud model is never loaded (the start fails:
  adopt it), a model already resident belongs to someone else and is never loaded or
  unloaded by us, a model our own earlier unload has not let go of fails the start.
  Otherwise our load is sent and kept open for the whole load; a failure is reported,
  never retried. There is no process: `Restart` is refused.
* We never unload a model we did not bring in: a load Ollama answered with 200 owes one
  unload (keep_alive 0), at a stop or the unload, then ``/api/ps`` is watched until the
  model is gone within a deadline (the stop's grace); a model still there then is
  reported, never sent again. A load that failed, was cancelled (Ollama aborts it) or is
  then not in ``/api/ps`` owes none. Whether Ollama answered the load in flight only its
  `LoadTicket` knows: the actor reads it into `Seen`.
* After our load, the model's ``expires_at`` is watched (a periodic look and every status
  survey): a foreign client changing it is reported as ownership lost, a model unloaded by
  someone else as such; neither is ever silently re-pinned.
* A worker's result of an earlier attempt (a start or stop came since) is dropped.
* A crash stops the instance as a stop would (the one unload we owe is sent); it is not
  restarted (an Ollama instance never is).
"""

from __future__ import annotations

from typing import assert_never

import attrs

from ..._edges.capture import RunEvidence
from ..._errors import BackendError, InvalidState, UnknownInstance
from ..._policy.ollama_parse import ExpiryWatch, LoadedModel
from ..mailbox import Crash, Crashed
from ..messages import (
    Annotate,
    DeepHealth,
    GetHealth,
    GetStatus,
    InstanceCommand,
    ReplyTo,
    Restart,
    Shutdown,
    Start,
    Stop,
)
from .effects import (
    Answer,
    Check,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    Effect,
    EndActor,
    EndLoad,
    EndWatch,
    NoteProbeTime,
    Publish,
    Refuse,
    StartLoad,
    StartWatch,
    SurveyFor,
    Unload,
)
from .messages import Checked, Closed, Loaded, OllamaInternal, Surveyed, Unloaded, Watched
from .state import OllamaState, Owner, Phase
from .status import load_failure, ollama_status

SHUTDOWN_GONE_S = 5.0
"""How long an unload of the instance (or a crash's) polls ``/api/ps`` for the model to go."""


@attrs.frozen
class Seen:
    """What the actor read of the live world as it took a message."""

    load_answered: bool = False
    """Ollama answered the load in flight with 200 (its `LoadTicket`)."""


NOTHING_SEEN = Seen()
"""A message taken while no load in flight was answered."""

Message = InstanceCommand | OllamaInternal | Crashed
"""Everything the Ollama actor's inbox carries."""

Effects = list[Effect]


def step(
    state: OllamaState, message: Message, now: float, seen: Seen = NOTHING_SEEN
) -> tuple[OllamaState, tuple[Effect, ...]]:
    """The instance's next state and what the actor must do, in order, for ``message``
    taken at trio time ``now`` (float seconds); ``seen``: what the actor read then."""
    out: Effects = []
    if isinstance(message, Crashed):
        state = _on_crash(state, message.crash, seen, out)
    elif isinstance(message, OllamaInternal):
        state = _apply(state, message, now, seen, out)
    else:
        state = _command(state, message, seen, out)
    return state, tuple(out)


# Commands.


def _command(state: OllamaState, command: InstanceCommand, seen: Seen, out: Effects) -> OllamaState:
    who = state.instance_id
    if state.closing:
        out.append(Refuse(command.reply, UnknownInstance(f"{who} is being unloaded")))
        return state
    match command:
        case Start():
            return _on_start(state, command.reply, out)
        case Restart():
            why = f"{who} drives Ollama, which runs no process of ours"
            out.append(Refuse(command.reply, InvalidState(f"{why}: it is never restarted")))
        case Stop():
            return _on_stop(state, command, seen, out)
        case GetStatus():
            out.append(SurveyFor(command.reply))
        case GetHealth():
            out.append(CheckHealth(command.reply))
        case DeepHealth():
            out.append(CheckDeepHealth(command.reply))
        case Annotate():
            out.append(Answer(command.reply, None))
            return attrs.evolve(state, supervision=command.supervision, restarts=command.restarts)
        case Shutdown():
            state = _end_tasks(attrs.evolve(state, closing=True), seen, out)
            owed = False
            if state.wanted:
                state, owed = state.begin_stop()
            out.append(CloseDown(owed, command.reply))
        case _:
            assert_never(command)
    return state


def _on_start(state: OllamaState, reply: ReplyTo[None], out: Effects) -> OllamaState:
    who = state.instance_id
    if state.phase in (Phase.CHECKING, Phase.LOADING):
        out.append(Answer(reply, None))  # starts coalesce: the load under way is the outcome
    elif state.phase is Phase.READY:
        out.append(Refuse(reply, InvalidState(f"{who} is already running")))
    elif state.phase is Phase.STOPPING:
        out.append(Refuse(reply, InvalidState(f"{who} is stopping; start it afterwards")))
    else:
        lingering = state.lingering is not None
        state = state.begin_start()
        out += [Check(state.attempt, lingering), Answer(reply, None)]
    return state


def _on_stop(state: OllamaState, command: Stop, seen: Seen, out: Effects) -> OllamaState:
    if state.phase is Phase.STOPPING:  # the unload under way answers it too
        return attrs.evolve(state, stop_callers=(*state.stop_callers, command.reply))
    if not state.wanted:
        out.append(Refuse(command.reply, InvalidState(f"{state.instance_id} is not running")))
        return state
    state, owed = _end_tasks(state, seen, out).begin_stop()
    if owed:
        out.append(Unload(command.grace_s))
        return attrs.evolve(state, stop_callers=(*state.stop_callers, command.reply))
    out.append(Answer(command.reply, _evidence(state)))
    return state


def _end_tasks(state: OllamaState, seen: Seen, out: Effects) -> OllamaState:
    """Cancel the load and the watch under way; a load Ollama answered owes its unload."""
    if state.loading:
        out.append(EndLoad(cancel=True))
    if state.watching:
        out.append(EndWatch())
    return attrs.evolve(state.settled(seen.load_answered), watching=False)


# Results posted by workers.


def _apply(
    state: OllamaState, message: OllamaInternal, now: float, seen: Seen, out: Effects
) -> OllamaState:
    match message:
        case Checked():
            return _on_checked(state, message, now, out)
        case Loaded():
            return _on_loaded(state, message, now, seen, out)
        case Watched():
            return _on_watched(state, message, now, out)
        case Surveyed():
            # a survey our own lateness spoiled (no verdict) keeps the last one there is
            if not (message.survey.no_verdict and state.survey is not None):
                state = attrs.evolve(state, survey=message.survey)
            if message.survey.resident is not None:
                state = state.saw(message.survey.resident, now)
            if message.reply is not None:  # the caller sees the status the events announced
                out += [Publish(), Answer(message.reply, ollama_status(state))]
        case Unloaded():
            return _on_unloaded(state, message, out)
        case Closed():
            out += [Answer(message.reply, None), EndActor()]
        case _:
            assert_never(message)
    return state


def _on_watched(state: OllamaState, message: Watched, now: float, out: Effects) -> OllamaState:
    """The watch's look is the Ollama instance's probe: timed for the edges, and what it
    found applied (a model gone while ready is reported in Ollama's terms, never reloaded)."""
    if message.attempt != state.attempt:
        return state
    if message.latency_s is not None:
        out.append(NoteProbeTime(message.latency_s, now))
    if message.resident is None:
        return state
    return state.saw(message.resident, now, message.wall)


def _on_checked(state: OllamaState, message: Checked, now: float, out: Effects) -> OllamaState:
    entry = message.entry
    if message.attempt != state.attempt:
        return state  # stopped meanwhile: nothing was loaded, nothing is owed
    if message.error is not None or message.cloud is not None:
        return state.fail_check(message.error, message.cloud)
    if entry is not None and state.lingering is not None:  # our own unload is still leaving
        failure = f"{state.tag} is still leaving ollama after our unload; start later"
        return attrs.evolve(state, phase=Phase.FAILED, failure=failure)
    if entry is not None and not state.unload_owed:  # someone else's: never ours to unload
        state = attrs.evolve(
            state, owner=Owner.THEIRS, phase=Phase.READY, resident=True, last_entry=entry
        )
        return _start_watch(state, out)
    if entry is not None:  # an earlier load of ours landed late: still ours
        return _now_resident(state, entry, now, out)
    out.append(StartLoad(state.attempt))
    return attrs.evolve(state, lingering=None, owner=Owner.OURS, phase=Phase.LOADING, loading=True)


def _on_loaded(
    state: OllamaState, message: Loaded, now: float, seen: Seen, out: Effects
) -> OllamaState:
    if message.attempt != state.attempt:
        return state
    if state.loading:
        out.append(EndLoad(cancel=False))
    state = state.settled(seen.load_answered)
    if message.error is not None:
        owner = state.owner if state.unload_owed else None  # never ours: no unload
        failure = load_failure(message.error)
        return attrs.evolve(state, phase=Phase.FAILED, failure=failure, owner=owner)
    if message.entry is None:  # not resident: nothing of ours to unload
        failure = f"ollama answered the load, but /api/ps does not list {state.tag}"
        return attrs.evolve(
            state, phase=Phase.FAILED, unload_owed=False, owner=None, failure=failure
        )
    return _now_resident(state, message.entry, now, out)


def _now_resident(state: OllamaState, entry: LoadedModel, now: float, out: Effects) -> OllamaState:
    state = attrs.evolve(
        state,
        owner=Owner.OURS,
        phase=Phase.READY,
        resident=True,
        last_entry=entry,
        watch=ExpiryWatch.after_load(entry),
        watch_from=now,
    )
    return _start_watch(state, out)


def _start_watch(state: OllamaState, out: Effects) -> OllamaState:
    out.append(StartWatch(state.attempt))
    return attrs.evolve(state, watching=True)


def _on_unloaded(state: OllamaState, message: Unloaded, out: Effects) -> OllamaState:
    waiters, crashed = state.stop_callers, state.crash_note
    state = attrs.evolve(state, phase=Phase.STOPPED, stop_callers=(), crash_note=None)
    if message.error is not None:
        note = f"{crashed or 'stopped'}; the unload failed: {message.error}"
        error = BackendError(f"{state.instance_id}: {message.error}")
        out += [Refuse(reply, error) for reply in waiters]
        return attrs.evolve(state, resident=None, stop_note=note)
    note = f"{crashed or 'stopped on request'}; model unloaded"
    state = attrs.evolve(state, resident=not message.gone, stop_note=note)
    if not message.gone:
        lingering = (
            f"model {state.tag} still resident {message.deadline_s:g} s after our unload; "
            "inferactors does not send it again"
        )
        state = attrs.evolve(state, lingering=lingering)
    out += [Answer(reply, _evidence(state)) for reply in waiters]
    return state


# A crash (the mailbox emitted `InstanceCrashed`, cancelled the requests under way and
# answered their callers).


def _on_crash(state: OllamaState, crash: Crash, seen: Seen, out: Effects) -> OllamaState:
    state = _end_tasks(state, seen, out)
    if state.closing or state.phase is Phase.STOPPING or not state.wanted:
        return state
    note = f"crashed ({crash.describe()})"
    state, owed = state.begin_stop()
    if owed:  # as an unload of the instance
        out.append(Unload(SHUTDOWN_GONE_S))
        return attrs.evolve(state, crash_note=note)
    kept = "; the model stays resident (loaded by someone else)"
    return attrs.evolve(state, stop_note=note + (kept if state.owner is Owner.THEIRS else ""))


def _evidence(state: OllamaState) -> RunEvidence:
    """A stop's evidence: empty (there is no process of ours)."""
    return RunEvidence.empty(runtime=state.runtime_id, instance_id=state.instance_id)
