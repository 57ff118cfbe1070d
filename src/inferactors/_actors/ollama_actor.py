"""The managed Ollama instance actor: drives one model of a running Ollama daemon.

Same shape as the process instance actor (design/actors.md): one trio task with a bounded
inbox whose loop never awaits inside a handler; the requests run as workers
(``_ollama_work``) that post their results back; replies go through ``answer``/``refuse``
and every change of the reported status is a `StateChanged` event.

What it does (seed-behaviour.md sections 4 and 5; checklist 63 to 71; FC-18 to FC-21; where
issue 4 says more, the issue wins):

- Start reads ``/api/tags`` and ``/api/ps`` first: a cloud model (``remote_host``) is never
  loaded (the start fails: adopt it), and a model already resident belongs to someone else
  and is never loaded or unloaded by us. Otherwise it loads the model with the configured
  keep_alive in a background task (one load in flight: a start meanwhile joins it, issue 9
  item 8), keeping the request open for the whole load (FC-18), and confirms the result in
  ``/api/ps``. A failure is reported, never retried (FC-19).
- We never unload a model we did not bring in (issue 9 item 7, over checklist 68): a load
  Ollama answered with 200 owes one unload (keep_alive 0), at stop or unload, then
  ``/api/ps`` is polled until the model is gone within a deadline (the stop's grace, float
  seconds); a model still lingering then is reported, never re-sent (FC-21). A load that failed,
  timed out, was cancelled (Ollama aborts it) or is then not in ``/api/ps`` owes none.
- After our load, the model's ``expires_at`` is watched (a periodic ``/api/ps`` look and
  every status probe); a foreign client changing it is reported as ownership lost, and a
  model unloaded by someone else as such; neither is ever silently re-pinned (FC-20).
- There is no process: `Restart` is refused, stop returns empty evidence, and the daemon is
  never started or stopped.
- A crash (an exception nobody foresaw in the loop or a worker; ``mailbox``) is reported as
  `InstanceCrashed`, the requests under way are cancelled and answered with it, and the
  instance stops as on a stop (the one unload we owe is sent; someone else's model is left
  alone). Like any Ollama instance it is not restarted; a new start loads again.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import assert_never

import attrs
import trio

from .._config.config import InferConfig
from .._edges.capture import RunEvidence
from .._errors import BackendError, InvalidState, UnknownInstance
from .._events import Event
from .._policy.admission import Plan
from .._policy.ollama_parse import ExpiryWatch, LoadedModel
from .mailbox import Crash, Mailbox, StatusSlot
from .messages import (
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
    answer,
    refuse,
)
from .ollama_book import OllamaBook, Owner, Phase, load_failure, ollama_status, ollama_tag_of
from .ollama_work import (
    SHUTDOWN_GONE_S,
    Checked,
    Closed,
    Loaded,
    LoadTicket,
    OllamaInternal,
    OllamaOpener,
    OllamaWork,
    Surveyed,
    Unloaded,
    Watched,
    open_ollama_client,
)

LOAD_TIMEOUT_S = 900.0
"""The load request's timeout when the instance has no readiness deadline (the reference's
Ollama load client, seed-behaviour.md section 3)."""

WATCH_INTERVAL_S = 2.0
"""Seconds between the ownership watch's ``/api/ps`` looks while our model is loaded."""

EMERGENCY_UNLOAD_S = 3.0
"""Bound on the unload a torn-down actor still owes."""


@attrs.define(eq=False)
class OllamaActor:
    """One managed Ollama instance; create with `OllamaActor.create`, run
    ``nursery.start_soon(actor.serve)``, and talk to it only through `inbox` with the
    commands of ``_messages`` (it satisfies the supervisor's ``Actor`` protocol)."""

    instance_id: str
    runtime_id: str
    plan: Plan
    instance_dir: Path | None
    _box: Mailbox
    _work: OllamaWork
    _book: OllamaBook
    _load_scope: trio.CancelScope | None = None
    _ticket: LoadTicket | None = None
    _watch_scope: trio.CancelScope | None = None
    _stop_waiters: list[ReplyTo[RunEvidence]] = attrs.Factory(list)
    _crash_note: str | None = None
    _closing: bool = False

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
    ) -> OllamaActor:
        """A new actor in state Loaded; nothing is sent to Ollama until `serve` runs and a
        command arrives.

        Args:
            plan: a managed Ollama plan (``plan.model`` is the registry's Ollama model).
            config: the runtime's config: ``managed.keep_alive`` is what the load sends,
                ``probe_timeout_s`` bounds each request, ``deep_timeout_s`` the deep health.
            open_ollama: the HTTP edge (`open_ollama_client` by default).
            watch_interval_s: float seconds between ownership checks of our loaded model.

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
        )
        return cls(instance_id, runtime_id, plan, instance_dir, box, work, OllamaBook(tag=tag))

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where commands for this actor go."""
        return self._box.inbox

    @property
    def tag(self) -> str:
        """The model's Ollama tag: what is loaded, unloaded and asked for a token."""
        return self._book.tag

    async def serve(self) -> None:
        """Run until unloaded or cancelled. On cancellation an unload still owed is sent
        (shielded, bounded by `EMERGENCY_UNLOAD_S`) and queued commands are answered with
        `UnknownInstance`."""
        try:
            await self._box.run(self._dispatch, self._on_crash)
        finally:
            await self._teardown()

    # The loop: every handler is synchronous.

    def _dispatch(self, message: object) -> None:
        if isinstance(message, OllamaInternal):
            self._apply(message)
        else:
            self._command(message)  # type: ignore[arg-type]  # only commands reach the inbox
        self._report()

    def _command(self, command: InstanceCommand) -> None:
        if self._closing:
            refuse(command.reply, UnknownInstance(f"{self.instance_id} is being unloaded"))
            return
        match command:
            case Start():
                self._on_start(command.reply)
            case Restart():
                why = f"{self.instance_id} drives Ollama, which runs no process of ours"
                refuse(command.reply, InvalidState(f"{why}: it is never restarted"))
            case Stop():
                self._on_stop(command)
            case GetStatus():
                self._box.soon(self._work.survey_for, command.reply)
            case GetHealth():
                self._box.soon(self._work.health, command.reply)
            case DeepHealth():
                self._box.soon(self._work.deep_health, command.reply)
            case Annotate():
                self._book.supervision, self._book.restarts = command.supervision, command.restarts
                answer(command.reply, None)
            case Shutdown():
                self._on_shutdown(command)
            case _:
                assert_never(command)

    def _apply(self, message: OllamaInternal) -> None:
        match message:
            case Checked():
                self._on_checked(message)
            case Loaded():
                self._on_loaded(message)
            case Watched():
                if message.attempt == self._book.attempt and message.resident is not None:
                    self._book.saw(message.resident, trio.current_time())
            case Surveyed():
                self._on_surveyed(message)
            case Unloaded():
                self._on_unloaded(message)
            case Closed():
                answer(message.reply, None)
                self._box.close()
            case _:
                assert_never(message)

    # Commands.

    def _on_start(self, reply: ReplyTo[None]) -> None:
        book = self._book
        if book.phase in (Phase.CHECKING, Phase.LOADING):
            answer(reply, None)  # concurrent starts coalesce: the load under way is the outcome
            return
        if book.phase is Phase.READY:
            refuse(reply, InvalidState(f"{self.instance_id} is already running"))
            return
        if book.phase is Phase.STOPPING:
            refuse(reply, InvalidState(f"{self.instance_id} is stopping; start it afterwards"))
            return
        lingering = book.lingering is not None
        attempt = book.begin_start()
        self._box.soon(self._work.check, attempt, lingering)
        answer(reply, None)

    def _on_stop(self, command: Stop) -> None:
        book = self._book
        if book.phase is Phase.STOPPING:
            self._stop_waiters.append(command.reply)
            return
        if not book.wanted:
            refuse(command.reply, InvalidState(f"{self.instance_id} is not running"))
            return
        self._cancel_tasks()
        if book.begin_stop():
            self._stop_waiters.append(command.reply)
            self._unload(command.grace_s)
            return
        answer(command.reply, self._evidence())

    def _on_shutdown(self, command: Shutdown) -> None:
        self._closing = True
        self._cancel_tasks()
        owed = self._book.begin_stop() if self._book.wanted else False
        closed = Closed(command.reply)  # if the close worker itself crashes
        self._box.finish(
            self._work.close, owed, self.instance_dir, command.reply, fallback=lambda _: closed
        )

    # Results posted by workers.

    def _on_checked(self, message: Checked) -> None:
        book = self._book
        if message.attempt != book.attempt:
            return  # stopped meanwhile: nothing was loaded, nothing is owed
        if message.error is not None or message.cloud is not None:
            book.fail_check(message.error, message.cloud)
            return
        if message.entry is not None and book.lingering is not None:
            book.phase = Phase.FAILED  # our own unload is still leaving: not someone else's
            book.failure = f"{book.tag} is still leaving ollama after our unload; start later"
            return
        if message.entry is not None and not book.unload_owed:
            book.owner, book.phase, book.resident = Owner.THEIRS, Phase.READY, True
            self._start_watch()
            return
        if message.entry is not None:  # an earlier load of ours landed late: still ours
            self._now_resident(message.entry)
            return
        book.lingering = None
        book.owner, book.phase = Owner.OURS, Phase.LOADING
        self._load_scope, self._ticket = trio.CancelScope(), LoadTicket()
        self._box.soon(self._work.load, book.attempt, self._load_scope, self._ticket)

    def _on_loaded(self, message: Loaded) -> None:
        book = self._book
        if message.attempt != book.attempt:
            return
        self._load_scope = None
        self._settle()
        if message.error is not None:
            book.phase, book.failure = Phase.FAILED, load_failure(message.error)
            book.owner = book.owner if book.unload_owed else None  # never ours: no unload
            return
        if message.entry is None:  # not resident: nothing of ours to unload (issue 9 item 7)
            book.phase, book.unload_owed, book.owner = Phase.FAILED, False, None
            book.failure = f"ollama answered the load, but /api/ps does not list {book.tag}"
            return
        self._now_resident(message.entry)

    def _now_resident(self, entry: LoadedModel) -> None:
        book = self._book
        book.owner, book.phase, book.resident = Owner.OURS, Phase.READY, True
        book.watch = ExpiryWatch.after_load(entry)
        book.watch_from = trio.current_time()
        self._start_watch()

    def _on_surveyed(self, message: Surveyed) -> None:
        book = self._book  # a survey our lateness spoiled (no verdict) keeps the last one:
        book.survey = book.survey if message.survey.no_verdict and book.survey else message.survey
        if message.survey.resident is not None:
            book.saw(message.survey.resident, trio.current_time())
        if message.reply is not None:
            self._report()  # the caller sees the same status the events announced
            answer(message.reply, ollama_status(book))

    def _on_unloaded(self, message: Unloaded) -> None:
        book = self._book
        book.phase = Phase.STOPPED
        waiters, self._stop_waiters = self._stop_waiters, []
        crashed, self._crash_note = self._crash_note, None
        if message.error is not None:
            book.resident = None
            book.stop_note = f"{crashed or 'stopped'}; the unload failed: {message.error}"
            for reply in waiters:
                refuse(reply, BackendError(f"{self.instance_id}: {message.error}"))
            return
        book.resident = not message.gone
        book.stop_note = f"{crashed or 'stopped on request'}; model unloaded"
        if not message.gone:
            book.lingering = (
                f"model {book.tag} still resident {message.deadline_s:g} s after our unload; "
                "inferactors does not send it again"
            )
        for reply in waiters:
            answer(reply, self._evidence())

    # A crash (the mailbox emitted `InstanceCrashed`, cancelled the requests under way and
    # answered their callers).

    def _on_crash(self, crash: Crash) -> None:
        self._load_scope = self._watch_scope = None  # cancelled with the other workers
        self._settle()
        book = self._book
        if not self._closing and book.phase is not Phase.STOPPING and book.wanted:
            note = f"crashed ({crash.describe()})"
            if book.begin_stop():
                self._crash_note = note
                self._unload(SHUTDOWN_GONE_S)  # as an unload of the instance
            else:
                kept = "; the model stays resident (loaded by someone else)"
                book.stop_note = note + (kept if book.owner is Owner.THEIRS else "")
        self._report()

    # Helpers.

    def _unload(self, deadline_s: float) -> None:
        failed = partial(Unloaded, False, deadline_s)  # if the unload worker itself crashes
        self._box.finish(self._work.unload, deadline_s, fallback=failed)

    def _start_watch(self) -> None:
        self._watch_scope = trio.CancelScope()
        self._box.soon(self._work.watch, self._book.attempt, self._watch_scope)

    def _settle(self) -> None:  # a load Ollama answered (`LoadTicket`) owes its unload
        if self._ticket is not None and self._ticket.answered:
            self._book.unload_owed = True
        self._ticket = None

    def _cancel_tasks(self) -> None:
        self._settle()
        for scope in (self._load_scope, self._watch_scope):
            if scope is not None:
                scope.cancel()
        self._load_scope = self._watch_scope = None

    def _evidence(self) -> RunEvidence:
        return RunEvidence.empty(runtime=self.runtime_id, instance_id=self.instance_id)

    def _report(self) -> None:
        self._box.report(ollama_status(self._book))

    async def _teardown(self) -> None:
        self._settle()
        if self._book.unload_owed:
            self._book.unload_owed = False
            with trio.move_on_after(EMERGENCY_UNLOAD_S, shield=True):
                await self._work.unload_now()
        waiters, self._stop_waiters = self._stop_waiters, []
        for waiter in waiters:
            refuse(waiter, UnknownInstance(f"{self.instance_id} is no longer loaded"))
        self._box.drain()
