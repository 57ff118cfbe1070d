"""The instance actor: one trio task per loaded instance, the only writer of its state.

Shape (style.md, "Actors"; llama-swap's single-writer process state machine):

* The actor owns a nursery and a bounded inbox. Its loop takes one message at a time and
  handles it without awaiting anything, so it always answers promptly.
* Work that does I/O (spawning, probing, stopping) runs as a worker task in the actor's
  nursery. A worker never touches the state: it posts its result back to the inbox as an
  internal message, and the loop applies it and answers the caller.
* The exit of a managed server is awaited by a watcher task the moment the process starts,
  so a crash is seen when it happens, not at the next poll.
* A monitor task probes the server: fast at first (10 ms doubling to 100 ms) until it is
  up, then once a second, and every change of the reported state becomes an event.
"""

from __future__ import annotations

from pathlib import Path
from typing import assert_never

import attrs
import trio

from ._capture import RunEvidence
from ._config import ControlMode, InferConfig
from ._errors import BackendError, InvalidState, UnknownInstance, Unsupported
from ._events import Event, ProcessExited, ProcessStarted, StateChanged, StopReason
from ._instance_msgs import (
    INTERNAL_TYPES,
    Confirmed,
    Exited,
    Internal,
    Probed,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    Stopped,
)
from ._instance_work import InstanceWork
from ._messages import (
    DeepHealth,
    GetHealth,
    GetStatus,
    InstanceCommand,
    ReplyTo,
    Shutdown,
    Start,
    Stop,
    answer,
    refuse,
)
from ._plan import Plan, ProberFactory
from ._process import ManagedProcess
from ._status import InstanceState, InstanceStatus, map_report

INBOX_SIZE = 64
"""Commands and internal results waiting for the loop; the loop never blocks, so this is ample."""

EMERGENCY_GRACE_S = 5.0
"""Grace for a server still running when the actor is torn down without an unload."""


@attrs.define(eq=False)
class InstanceActor:
    """One instance: its plan, its process (when managed) and its reported status.

    Create with `InstanceActor.create`, run with ``await nursery.start(actor.serve)``, and
    talk to it only through `inbox` with the commands of ``_messages``.
    """

    instance_id: str
    runtime_id: str
    plan: Plan
    config: InferConfig
    instance_dir: Path | None
    _events: trio.MemorySendChannel[Event]
    _inbox_send: trio.MemorySendChannel[object]
    _inbox_recv: trio.MemoryReceiveChannel[object]
    _work: InstanceWork
    _nursery: trio.Nursery | None = None
    _status: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)
    _process: ManagedProcess | None = None
    _starting: bool = False
    _watching: bool = False
    _stop_reason: StopReason | None = None
    _stop_waiters: list[ReplyTo[RunEvidence]] = attrs.Factory(list)
    _after_start: list[Stop] = attrs.Factory(list)
    _last: RunEvidence | None = None
    _last_reason: StopReason | None = None
    _monitor: trio.CancelScope | None = None
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
        open_prober: ProberFactory,
        events: trio.MemorySendChannel[Event],
    ) -> InstanceActor:
        """A new actor in state Loaded; nothing runs until `serve` is started."""
        send, receive = trio.open_memory_channel[object](INBOX_SIZE)
        work = InstanceWork(plan=plan, config=config, open_prober=open_prober, post=send)
        return cls(instance_id, runtime_id, plan, config, instance_dir, events, send, receive, work)

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where commands for this actor go."""
        return self._inbox_send

    @property
    def managed(self) -> bool:
        """Whether inferactors runs this server's process."""
        return self.plan.mode is ControlMode.MANAGED

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the actor until it is unloaded or cancelled.

        On cancellation a server that still runs is killed (its whole process group,
        SIGTERM then SIGKILL after 5 s, shielded and bounded) so no server outlives its
        actor (checklist item 61). Commands left in the inbox are answered with
        `UnknownInstance`.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                async for message in self._inbox_recv:
                    self._dispatch(message)
        finally:
            await self._teardown()

    # The loop: every handler is synchronous.

    def _dispatch(self, message: object) -> None:
        if isinstance(message, INTERNAL_TYPES):
            self._apply(message)
        else:
            self._command(message)  # type: ignore[arg-type]  # only commands reach the inbox

    def _command(self, command: InstanceCommand) -> None:
        if self._closing:
            refuse(command.reply, UnknownInstance(f"{self.instance_id} is being unloaded"))
            return
        match command:
            case Start():
                self._on_start(command)
            case Stop():
                self._on_stop(command)
            case GetStatus():
                self._on_status(command)
            case GetHealth():
                self._nursery_or_fail().start_soon(self._work.health, command.reply)
            case DeepHealth():
                self._nursery_or_fail().start_soon(self._work.deep_health, command.reply)
            case Shutdown():
                self._on_shutdown(command)
            case _:
                assert_never(command)

    def _apply(self, message: Internal) -> None:
        match message:
            case Spawned():
                self._on_spawned(message)
            case SpawnFailed():
                self._starting = False
                refuse(message.reply, message.error)
                for stop in self._after_start:
                    refuse(stop.reply, InvalidState(f"{self.instance_id} is not running"))
                self._after_start.clear()
            case Exited():
                self._on_exited(message.process, message.evidence)
            case Stopped():
                self._on_exited(message.process, message.evidence)
                self._answer_stop(message.evidence)
            case Probed():
                self._on_probed(message)
            case Confirmed():
                self._watch_adopted()
                answer(message.reply, None)
            case ShutdownDone():
                answer(message.reply, None)
                self._nursery_or_fail().cancel_scope.cancel()
            case _:
                assert_never(message)

    # Commands.

    def _on_start(self, command: Start) -> None:
        if not self.managed:
            self._nursery_or_fail().start_soon(self._work.confirm_adopted, command.reply)
            return
        if self._process is not None or self._starting:
            refuse(command.reply, InvalidState(f"{self.instance_id} is already running"))
            return
        self._starting = True
        self._nursery_or_fail().start_soon(self._work.spawn, self._nursery_or_fail(), command.reply)

    def _on_stop(self, command: Stop) -> None:
        if not self.managed:
            refuse(
                command.reply,
                Unsupported(
                    f"{self.instance_id} is adopted: inferactors observes it and never stops "
                    "it; unload forgets the registration"
                ),
            )
            return
        if self._starting:
            self._after_start.append(command)
            return
        process = self._process
        if process is None:
            refuse(command.reply, InvalidState(f"{self.instance_id} is not running"))
            return
        self._stop_waiters.append(command.reply)
        if self._stop_reason is None:
            self._stop_reason = StopReason.REQUESTED
            self._nursery_or_fail().start_soon(self._work.stop, process, command.grace_s)

    def _on_status(self, command: GetStatus) -> None:
        if self.managed and (self._process is None or self._starting):
            answer(command.reply, self._status)
            return
        self._nursery_or_fail().start_soon(self._work.probe_for, self._process, command.reply)

    def _on_shutdown(self, command: Shutdown) -> None:
        self._closing = True
        if self._process is not None and self._stop_reason is None:
            self._stop_reason = StopReason.UNLOAD
        self._nursery_or_fail().start_soon(
            self._work.shutdown, self._process, command.grace_s, self.instance_dir, command.reply
        )

    # Results posted by workers.

    def _on_spawned(self, message: Spawned) -> None:
        self._starting = False
        process = message.process
        self._process = process
        self._stop_reason = None
        args = self.plan.launch.args if self.plan.launch else ()
        self._emit(ProcessStarted(self.instance_id, process.pid, args, trio.current_time()))
        self._set_status(InstanceStatus(InstanceState.DEGRADED, "starting: not listening yet"))
        nursery = self._nursery_or_fail()
        nursery.start_soon(self._work.watch_exit, process)
        self._start_monitor(process)
        answer(message.reply, None)
        pending, self._after_start = self._after_start, []
        for stop in pending:
            self._on_stop(stop)

    def _on_exited(self, process: ManagedProcess, evidence: RunEvidence) -> None:
        if process is not self._process:
            return
        self._process = None
        self._stop_monitor()
        reason = self._stop_reason or StopReason.CRASH
        self._stop_reason = None
        self._last = attrs.evolve(evidence, runtime=self.runtime_id, instance_id=self.instance_id)
        self._last_reason = reason
        now = trio.current_time()
        self._emit(
            ProcessExited(
                self.instance_id, evidence.pid, evidence.exit_code, evidence.signal, reason, now
            )
        )
        self._set_status(self._idle_status())

    def _answer_stop(self, evidence: RunEvidence) -> None:
        full = attrs.evolve(evidence, runtime=self.runtime_id, instance_id=self.instance_id)
        waiters, self._stop_waiters = self._stop_waiters, []
        for reply in waiters:
            answer(reply, full)

    def _on_probed(self, message: Probed) -> None:
        current = message.process is self._process
        if current and not (self.managed and self._process is None):
            alive = self._process is not None and self._process.running
            status = map_report(
                message.report,
                model=self.plan.served_model,
                alive=alive or not self.managed,
                adopted=not self.managed,
            )
            self._set_status(self._with_process_facts(status))
        if message.reply is not None:
            answer(message.reply, self._status)

    # Helpers.

    def _idle_status(self) -> InstanceStatus:
        if self._last is None:
            return InstanceStatus(InstanceState.LOADED)
        reason = self._last_reason
        detail = "stopped on request" if reason is StopReason.REQUESTED else "server process exited"
        if reason not in (StopReason.REQUESTED, StopReason.CRASH, None):
            detail = f"stopped: {reason.value}"
        return InstanceStatus(
            InstanceState.EXITED,
            detail,
            exit_code=self._last.exit_code,
            stop_reason=reason.value if reason else None,
        )

    def _with_process_facts(self, status: InstanceStatus) -> InstanceStatus:
        process = self._process
        if process is None:
            return status
        uptime = trio.current_time() - process.started_at
        return attrs.evolve(status, pid=process.pid, uptime_s=uptime)

    def _set_status(self, status: InstanceStatus) -> None:
        old = self._status
        self._status = status
        if (old.state, old.detail) != (status.state, status.detail):
            now = trio.current_time()
            self._emit(StateChanged(self.instance_id, old.state, status.state, status.detail, now))

    def _emit(self, event: Event) -> None:
        try:
            self._events.send_nowait(event)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # a slow or gone subscriber loses events; the actor never waits for one

    def _start_monitor(self, process: ManagedProcess | None) -> None:
        self._stop_monitor()
        scope = trio.CancelScope()
        self._monitor = scope
        self._nursery_or_fail().start_soon(self._work.monitor, process, scope)

    def _stop_monitor(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            self._monitor = None

    def _watch_adopted(self) -> None:
        if not self._watching:
            self._watching = True
            self._start_monitor(None)

    def _nursery_or_fail(self) -> trio.Nursery:
        if self._nursery is None:
            raise BackendError(f"{self.instance_id}: the actor is not serving")
        return self._nursery

    async def _teardown(self) -> None:
        process = self._process
        if process is not None and process.running:
            with trio.move_on_after(EMERGENCY_GRACE_S + 3.0) as scope:
                scope.shield = True
                await process.terminate(EMERGENCY_GRACE_S)
            process.kill_group_now()
            self._emit(
                ProcessExited(
                    self.instance_id,
                    process.pid,
                    None,
                    None,
                    StopReason.SHUTDOWN,
                    trio.current_time(),
                )
            )
        self._drain_inbox()

    def _drain_inbox(self) -> None:
        while True:
            try:
                message = self._inbox_recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            reply = getattr(message, "reply", None)
            if isinstance(reply, trio.MemorySendChannel):
                refuse(reply, UnknownInstance(f"{self.instance_id} is no longer loaded"))
