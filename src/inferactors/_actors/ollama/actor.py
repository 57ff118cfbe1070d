"""The managed Ollama instance actor: drives one model of a running Ollama daemon.

Same shape as the process instance actor (design/actors.md): one trio task with a bounded
inbox; a thin loop that takes one message, steps it through the pure rules (``step.py``),
keeps the new state and carries out the effects (``effects.py``); the requests run as
workers (``work.py``) that post their results back (``messages.py``); every change of the
reported status is a `StateChanged` event.

What it does:

- Start reads ``/api/tags`` and ``/api/ps`` first: a cloud model (``remote_host``) is never
  loaded (the start fails: adopt it), and a model already resident belongs to someone else
  and is never loaded or unloaded by us. Otherwise it loads the model with the configured
  keep_alive in a background task (one load in flight: a start meanwhile joins it),
  keeping the request open for the whole load, and confirms the result in
  ``/api/ps``. A failure is reported, never retried.
- We never unload a model we did not bring in: a load
  Ollama answered with 200 owes one unload (keep_alive 0), at stop or unload, then
  ``/api/ps`` is polled until the model is gone within a deadline (the stop's grace, float
  seconds); a model still lingering then is reported, never re-sent. A load that failed,
  timed out, was cancelled (Ollama aborts it) or is then not in ``/api/ps`` owes none.
- After our load, the model's ``expires_at`` is watched (a periodic ``/api/ps`` look and
  every status probe); a foreign client changing it is reported as ownership lost, and a
  model unloaded by someone else as such; neither is ever silently re-pinned.
- There is no process: `Restart` is refused, stop returns empty evidence, and the daemon is
  never started or stopped.
- A crash (an exception nobody foresaw in the loop or a worker; ``mailbox``) is reported as
  `InstanceCrashed`, the requests under way are cancelled and answered with it, and the
  instance stops as on a stop (the one unload we owe is sent; someone else's model is left
  alone). Like any Ollama instance it is not restarted; a new start loads again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import attrs
import trio

from ..._config.config import InferConfig
from ..._edges.bundle import ProbeTimed, ignore_probe
from ..._errors import UnknownInstance
from ..._events import Event
from ..._policy.admission import Plan
from ..._policy.probe_schedule import RUNNING_PROBE_S
from ..mailbox import Crash, Crashed, Mailbox, StatusSlot
from ..messages import answer, refuse
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
from .messages import Closed, LoadTicket, Unloaded
from .state import OllamaState, ollama_tag_of
from .status import ollama_status
from .step import Message, Seen, step
from .work import OllamaOpener, OllamaWork, open_ollama_client

LOAD_TIMEOUT_S = 900.0
"""The load request's timeout when the instance has no readiness deadline (the original's
Ollama load client waited this long)."""

WATCH_INTERVAL_S = RUNNING_PROBE_S
"""Seconds between the watch's ``/api/ps`` looks while the model is resident: the probe
period of a server that is up, so a model Ollama unloads is seen within one period."""

EMERGENCY_UNLOAD_S = 3.0
"""Bound on the unload a torn-down actor still owes."""


@attrs.define(eq=False)
class OllamaActor:
    """One managed Ollama instance; create with `OllamaActor.create`, run
    ``nursery.start_soon(actor.serve)``, and talk to it only through `inbox` with the
    commands of ``_actors/messages.py`` (it satisfies the supervisor's ``Actor`` protocol)."""

    instance_id: str
    runtime_id: str
    plan: Plan
    instance_dir: Path | None
    _box: Mailbox
    _work: OllamaWork
    _state: OllamaState
    _on_probe: Callable[[ProbeTimed], None] = ignore_probe
    _load_scope: trio.CancelScope | None = None
    _ticket: LoadTicket | None = None
    _watch_scope: trio.CancelScope | None = None

    @classmethod
    def create(
        cls,
        *,
        instance_id: str,
        runtime_id: str,
        plan: Plan,
        config: InferConfig,
        instance_dir: Path | None,
        events: trio.MemorySendChannel[Event],
        open_ollama: OllamaOpener = open_ollama_client,
        watch_interval_s: float = WATCH_INTERVAL_S,
        slot: StatusSlot | None = None,
        on_probe: Callable[[ProbeTimed], None] = ignore_probe,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> OllamaActor:
        """A new actor in state Loaded; nothing is sent to Ollama until `serve` runs and a
        command arrives.

        Args:
            plan: a managed Ollama plan (``plan.model`` is the registry's Ollama model).
            config: the runtime's config: ``managed.keep_alive`` is what the load sends,
                ``probe_timeout_s`` bounds each request, ``deep_timeout_s`` the deep health.
            open_ollama: the HTTP edge (`open_ollama_client` by default).
            watch_interval_s: float seconds between the ``/api/ps`` looks while the model is
                resident (the probe period, `WATCH_INTERVAL_S`).
            on_probe: `Edges.on_probe`: each look's `ProbeTimed` (called in the loop).
            wall_clock: the calendar time now (aware), to read ``/api/ps``'s ``expires_at``.

        The load request's timeout is the instance's readiness deadline, else
        `LOAD_TIMEOUT_S`.
        """
        box = Mailbox.create(instance_id, events, slot)  # slot: the status board's
        tag = ollama_tag_of(plan)
        keep_alive = config.managed.keep_alive if config.managed is not None else "30m"
        work = OllamaWork(
            base_url=plan.spec.base_url(),
            tag=tag,
            keep_alive=keep_alive,
            probe_timeout_s=config.probe_timeout_s,
            load_timeout_s=plan.supervision.readiness_timeout_s or LOAD_TIMEOUT_S,
            deep_timeout_s=config.deep_timeout_s,
            watch_interval_s=watch_interval_s,
            open_api=open_ollama,
            post=box.inbox,
            wall_clock=wall_clock,
        )
        state = OllamaState(instance_id, runtime_id, tag)
        return cls(instance_id, runtime_id, plan, instance_dir, box, work, state, on_probe)

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where commands for this actor go."""
        return self._box.inbox

    @property
    def tag(self) -> str:
        """The model's Ollama tag: what is loaded, unloaded and asked for a token."""
        return self._state.tag

    async def serve(self) -> None:
        """Run until unloaded or cancelled. On cancellation an unload still owed is sent
        (shielded, bounded by `EMERGENCY_UNLOAD_S`) and queued commands are answered with
        `UnknownInstance`."""
        try:
            await self._box.run(self._dispatch, self._on_crash)
        finally:
            await self._teardown()

    # The loop: receive, step, carry out, publish; nothing here awaits.

    def _dispatch(self, message: object) -> None:
        self._take(message)  # type: ignore[arg-type]  # only messages of `Message` arrive
        self._report()

    def _on_crash(self, crash: Crash) -> None:
        self._take(Crashed(crash))
        self._report()

    def _take(self, message: Message) -> None:
        seen = Seen(load_answered=self._ticket is not None and self._ticket.answered)
        self._state, effects = step(self._state, message, trio.current_time(), seen)
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: Effect) -> None:  # one arm per effect
        box, work = self._box, self._work
        match effect:
            case Answer():
                answer(effect.reply, effect.value)
            case Refuse():
                refuse(effect.reply, effect.error)
            case Publish():
                self._report()
            case Check():
                box.soon(work.check, effect.attempt, effect.lingering)
            case StartLoad():
                self._load_scope, self._ticket = trio.CancelScope(), LoadTicket()
                box.soon(work.load, effect.attempt, self._load_scope, self._ticket)
            case EndLoad():
                if effect.cancel and self._load_scope is not None:
                    self._load_scope.cancel()
                self._load_scope, self._ticket = None, None
            case StartWatch():
                self._watch_scope = trio.CancelScope()
                box.soon(work.watch, effect.attempt, self._watch_scope)
            case EndWatch():
                if self._watch_scope is not None:
                    self._watch_scope.cancel()
                self._watch_scope = None
            case NoteProbeTime():
                self._on_probe(ProbeTimed(self.instance_id, effect.latency_s, effect.at))
            case Unload():
                failed = partial(Unloaded, False, effect.deadline_s)  # if the worker crashes
                box.finish(work.unload, effect.deadline_s, fallback=failed)
            case SurveyFor():
                box.soon(work.survey_for, effect.reply)
            case CheckHealth():
                box.soon(work.health, effect.reply)
            case CheckDeepHealth():
                box.soon(work.deep_health, effect.reply)
            case CloseDown():
                closed = Closed(effect.reply)  # if the close worker itself crashes
                owed, directory, reply = effect.owed, self.instance_dir, effect.reply
                box.finish(work.close, owed, directory, reply, fallback=lambda _: closed)
            case EndActor():
                box.close()

    def _report(self) -> None:
        self._box.report(ollama_status(self._state))

    async def _teardown(self) -> None:
        answered = self._ticket is not None and self._ticket.answered
        state = self._state.settled(answered)
        if state.unload_owed:
            self._state = state = attrs.evolve(state, unload_owed=False)
            with trio.move_on_after(EMERGENCY_UNLOAD_S, shield=True):
                await self._work.unload_now()
        gone = UnknownInstance(f"{self.instance_id} is no longer loaded")
        for waiter in state.stop_callers:
            refuse(waiter, gone)
        self._box.drain()
