"""The instance actor: one trio task per loaded instance, the only writer of its state.

Shape (style.md, "Actors"; llama-swap's single-writer process state machine):

* The actor owns a nursery and a bounded inbox. Its loop takes one message at a time and
  handles it without awaiting anything, so it always answers promptly.
* Work that does I/O (spawning, probing, stopping) runs as a worker task in the actor's
  nursery (``instance_work``). A worker never touches the state: it posts its result back
  to the inbox, and the loop applies it (``instance_book``) and answers the caller.
* The exit of a managed server is awaited by a watcher task the moment the process starts,
  so a crash is seen when it happens, not at the next poll.
* Per process, the actor also runs a monitor (probes: 10 ms doubling to 100 ms until up,
  then every second), a readiness timer, an exposure watch (every 250 ms) and, when
  configured, the deep-health watchdog. All of them end with the process. Starting them
  and reacting to what they report is `InstanceWatch` (``instance_watch``).

This module holds the actor itself: the loop's dispatch, the commands (start, stop,
status, shutdown), the start and exit of a process, a crash, and the teardown.

A crash (an exception nobody foresaw in the loop or a worker; ``mailbox``) resets this
instance alone: `InstanceCrashed` is emitted, the watching workers are cancelled and their
callers answered with the crash, and a managed server is stopped with reason ``error``
(gracefully, `CRASH_GRACE_S`), so the supervisor restarts it under its restart policy; a
start under way is aborted once it has spawned. An adopted server is never signalled: the
supervisor restarts the watching. A stop already under way keeps its reason.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import assert_never

import attrs
import trio

from ..._config.config import ControlMode, InferConfig
from ..._edges.bundle import Edges
from ..._edges.capture import RunEvidence
from ..._edges.process import ManagedProcess
from ..._errors import InvalidState, UnknownInstance, Unsupported
from ..._events import Event, ModelTampered, ProcessExited, ProcessStarted, StopReason
from ..._models.registry import ModelRegistry
from ..._policy.admission import Plan
from ..._status import InstanceState, InstanceStatus
from ..mailbox import Crash, Mailbox, StatusSlot
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
    answer,
    refuse,
)
from .book import InstanceBook
from .messages import (
    Confirmed,
    DeepHealthDone,
    Exited,
    ExposureFound,
    Internal,
    PinChanged,
    Probed,
    ReadinessExpired,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    StartupFault,
    Stopped,
    WatchdogResult,
)
from .start_calls import StartWaiters, abandoning_stop, caller_gone
from .watch import InstanceWatch
from .work import InstanceWork

EMERGENCY_GRACE_S = 5.0
"""Grace for a server still running when the actor is torn down without an unload."""

CRASH_GRACE_S = 3.0
"""Grace for a server stopped because its instance crashed (as for a health kill)."""


@attrs.define(eq=False)
class InstanceActor:
    """One instance: its plan, its process (when managed) and its reported status.

    Create with `InstanceActor.create`, run with ``nursery.start_soon(actor.serve)``, and
    talk to it only through `inbox` with the commands of ``_messages``.
    """

    instance_id: str
    runtime_id: str
    plan: Plan
    instance_dir: Path | None
    _box: Mailbox
    _work: InstanceWork
    _book: InstanceBook
    _watch: InstanceWatch
    _stop_waiters: dict[ManagedProcess, list[ReplyTo[RunEvidence]]] = attrs.Factory(dict)
    _after_start: list[Stop] = attrs.Factory(list)
    _waiters: StartWaiters = attrs.Factory(StartWaiters)  # the start in flight's callers
    _crash_while_starting: Crash | None = None
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
        edges: Edges,
        events: trio.MemorySendChannel[Event],
        registry: ModelRegistry | None = None,
        slot: StatusSlot | None = None,
    ) -> InstanceActor:
        """A new actor in state Loaded; nothing runs until `serve` is started. ``registry``
        checks the model's pins at every spawn (None: a bare actor pins nothing); ``slot``
        is where it publishes its status (the runtime's status board)."""
        box = Mailbox.create(instance_id, events, slot)
        ring = edges.logs.ring(instance_id, config.managed)
        work = InstanceWork(plan, config, edges, box.inbox, registry, ring)
        book = InstanceBook(managed=plan.mode is ControlMode.MANAGED)
        watch = InstanceWatch(instance_id, plan, box, work, book)
        if plan.admitted is not None:  # adopted: what the load's probe found, until watched
            watch.on_probed(Probed(plan.admitted, None))
        box.slot.publish(watch.status())  # on the board once accepted; an event at its 1st message
        return cls(instance_id, runtime_id, plan, instance_dir, box, work, book, watch)

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where commands for this actor go."""
        return self._box.inbox

    @property
    def managed(self) -> bool:
        """Whether inferactors runs this server's process."""
        return self._book.managed

    async def serve(self) -> None:
        """Run the actor until it is unloaded or cancelled.

        On cancellation a server that still runs is killed (its whole process group,
        SIGTERM then SIGKILL after 5 s, shielded and bounded) so no server outlives its
        actor (checklist item 61). Commands left in the inbox are answered with
        `UnknownInstance`.
        """
        try:
            await self._box.run(self._dispatch, self._on_crash)
        finally:
            await self._teardown()

    # The loop: every handler is synchronous.

    def _dispatch(self, message: object) -> None:
        if isinstance(message, Internal):
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
                self._on_start(command.reply, restart=False)
            case Restart():
                self._on_start(command.reply, restart=True)
            case Stop():
                self._on_stop(command)
            case GetStatus():  # `InferRuntime.status` reads the board; no probe
                answer(command.reply, self._status())
            case GetHealth():
                self._box.soon(self._work.health, self._book.process, command.reply)
            case DeepHealth():
                self._box.soon(self._work.deep_health, self._book.process, command.reply)
            case Annotate():
                self._book.supervision, self._book.restarts = command.supervision, command.restarts
                answer(command.reply, None)
            case Shutdown():
                self._on_shutdown(command)
            case _:
                assert_never(command)

    def _apply(self, message: Internal) -> None:
        match message:
            case Spawned():
                self._on_spawned(message)
            case SpawnFailed():
                self._on_spawn_failed(message)
            case Exited():
                self._on_exited(message.process, message.evidence)
            case Stopped():
                self._on_exited(message.process, message.evidence)
                self._answer_stop(message.process, message.evidence)
            case Probed():
                self._watch.on_probed(message)
            case ExposureFound():
                self._watch.on_exposure(message.process, message.exposure.describe())
            case PinChanged():
                self._watch.on_pin_changed(message)
            case ReadinessExpired():
                self._watch.on_readiness_expired(message)
            case WatchdogResult():
                self._watch.on_watchdog(message)
            case DeepHealthDone():
                self._watch.on_deep_health(message)
            case StartupFault():
                self._watch.on_startup_fault(message)
            case Confirmed():
                self._book.wanted = True  # watched: a crash restarts the watching
                self._watch.watch_adopted()
                answer(message.reply, None)
            case ShutdownDone():
                answer(message.reply, None)
                self._box.close()
            case _:
                assert_never(message)

    # Commands.

    def _on_start(self, reply: ReplyTo[None], *, restart: bool) -> None:
        book = self._book
        if not self.managed and restart and not book.wanted:
            refuse(reply, InvalidState(f"{self.instance_id} is not being watched"))
            return
        if not self.managed:
            self._box.soon(self._work.confirm_adopted, reply)
            return
        if book.exposed is not None:
            refuse(
                reply,
                InvalidState(
                    f"the server was stopped for listening beyond loopback ({book.exposed}); "
                    "reload the instance"
                ),
            )
            return
        if book.starting and not restart:
            self._waiters.join(reply)  # concurrent starts coalesce (`start_calls`)
            return
        if book.process is not None or book.starting:
            refuse(reply, InvalidState(f"{self.instance_id} is already running"))
            return
        if caller_gone(reply) and not restart:
            return  # its caller gave up before we read it: spawn nothing
        if restart and not book.wanted:
            refuse(reply, InvalidState(f"{self.instance_id} was stopped by the operator"))
            return
        book.starting = True
        self._waiters.join(reply)
        failed = partial(SpawnFailed, reply=reply)  # if the spawn worker itself crashes
        self._box.finish(self._work.spawn, self._box.nursery, reply, book.tampered, fallback=failed)

    def _on_stop(self, command: Stop) -> None:
        book = self._book
        if not self.managed:
            refuse(
                command.reply,
                Unsupported(
                    f"{self.instance_id} is adopted: inferactors observes it and never stops "
                    "it; unload forgets the registration"
                ),
            )
            return
        book.wanted = False
        if book.starting:
            self._after_start.append(command)
            return
        if book.process is None:
            refuse(command.reply, InvalidState(f"{self.instance_id} is not running"))
            return
        self._stop_waiters.setdefault(book.process, []).append(command.reply)
        self._watch.stop_process(StopReason.REQUESTED, command.grace_s)

    def _on_shutdown(self, command: Shutdown) -> None:
        self._closing = True
        process = self._book.process
        if process is not None and self._book.stop_reason is None:
            self._book.stop_reason = StopReason.UNLOAD
        done = ShutdownDone(command.reply)  # if the shutdown worker itself crashes
        work, grace_s, reply = self._work.shutdown, command.grace_s, command.reply
        self._box.finish(work, process, grace_s, self.instance_dir, reply, fallback=lambda _: done)

    # Results posted by workers.

    def _on_spawned(self, message: Spawned) -> None:
        process = message.process
        self._book.spawned(process)
        args = process.args  # as executed: the pinned launch, not the plan's
        self._box.emit(ProcessStarted(self.instance_id, process.pid, args, process.started_at))
        self._watch.start_process_tasks(process, message.pins)
        if self._waiters.abandoned() and not self._after_start:  # every caller gave up
            self._after_start.append(abandoning_stop())
        aborted, self._after_start = self._after_start, []
        crash, self._crash_while_starting = self._crash_while_starting, None
        if crash is not None:
            self._waiters.abort(self.instance_id, f"a crash ({crash.describe()})")
            for stop in aborted:
                self._on_stop(stop)
            self._stop_for_crash(crash)
        elif aborted:
            self._waiters.abort(self.instance_id, "a stop")
            for stop in aborted:
                self._on_stop(stop)
        else:
            self._waiters.succeed()

    def _on_spawn_failed(self, message: SpawnFailed) -> None:
        self._book.starting = False
        self._crash_while_starting = None  # nothing runs: nothing to stop
        if message.hold is not None and message.hold != self._book.tampered:
            self._book.tampered = hold = message.hold  # held down; never counted (supervisor)
            error, now = hold.error, trio.current_time()
            self._box.emit(
                ModelTampered(self.instance_id, error.model, error.shard, error.why, now)
            )
        self._waiters.fail(message.error)
        for stop in self._after_start:
            refuse(stop.reply, InvalidState(f"{self.instance_id} is not running"))
        self._after_start.clear()

    def _on_exited(self, process: ManagedProcess, evidence: RunEvidence) -> None:
        if process is not self._book.process:
            return
        self._watch.cancel_process_tasks()
        reason = self._book.exited(
            attrs.evolve(evidence, runtime=self.runtime_id, instance_id=self.instance_id)
        )
        now = trio.current_time()
        self._box.emit(self._book.exit_event(self.instance_id, evidence, reason, now))

    def _answer_stop(self, process: ManagedProcess, evidence: RunEvidence) -> None:
        full = attrs.evolve(evidence, runtime=self.runtime_id, instance_id=self.instance_id)
        for reply in self._stop_waiters.pop(process, []):
            answer(reply, full)

    # A crash (the mailbox emitted `InstanceCrashed`, cancelled the watching workers and
    # answered their callers).

    def _on_crash(self, crash: Crash) -> None:
        self._watch.forget_tasks()
        if self._closing:
            return  # the unload under way finishes the job
        if not self.managed:  # never signalled; the next probe says how it is
            detail = f"crashed ({crash.describe()})"
            self._book.mapped = InstanceStatus(InstanceState.DEGRADED, detail)
        if self._book.starting:
            self._crash_while_starting = crash  # stopped once spawned (`_on_spawned`)
        else:
            self._stop_for_crash(crash)
        self._report()

    def _stop_for_crash(self, crash: Crash) -> None:
        book = self._book
        if book.process is None or book.stop_reason is not None:
            return  # nothing runs, or a stop is under way: its reason stands
        detail = f"crashed ({crash.describe()}); stopping its server"
        book.mapped = InstanceStatus(InstanceState.DEGRADED, detail)
        self._watch.stop_process(StopReason.ERROR, CRASH_GRACE_S)

    # Helpers.

    def _status(self) -> InstanceStatus:
        return self._watch.status()

    def _report(self) -> None:
        self._box.report(self._status())

    async def _teardown(self) -> None:
        process = self._book.process
        if process is not None and process.running:
            with trio.move_on_after(EMERGENCY_GRACE_S + 3.0, shield=True):
                await process.terminate(EMERGENCY_GRACE_S)
            process.kill_group_now()
            now = trio.current_time()
            self._box.emit(
                ProcessExited(self.instance_id, process.pid, None, None, StopReason.SHUTDOWN, now)
            )
        gone = UnknownInstance(f"{self.instance_id} was unloaded before it answered")
        for reply in [r for waiters in self._stop_waiters.values() for r in waiters]:
            refuse(reply, gone)
        for stop in self._after_start:
            refuse(stop.reply, gone)
        self._waiters.fail(gone)
        self._box.drain()
