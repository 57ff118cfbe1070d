"""The instance actor: one trio task per loaded instance, the one writer of its state.

Its loop is thin (llama-swap's single-writer router, design/actors.md): take one message,
read the live facts the rules need (`Seen`), ``step`` it (``step.py``: every decision, pure),
keep the new `State`, carry out the effects (``effects.py``) in order, and publish the
status (``status.py``). It never awaits inside that loop, so it always answers promptly.

The effects become workers in the actor's nursery: the process's life (``process_life``),
the probes (``probing``), the exposure watch (``exposure``). A worker never touches the
state: it posts its result (``messages.py``) back to the inbox. The tasks that watch one
process (exit watcher, monitor, exposure watch, start-up fault watch, readiness timer and,
once ready, the watchdog) share one group of cancel scopes and end together.

A crash (an exception nobody foresaw in the loop or a worker; ``mailbox``) becomes a
`Crashed` message to the same rules: the instance resets alone. If the actor is cancelled
with its server still running, its teardown kills the server's group (shielded, bounded).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from ..._config.config import InferConfig
from ..._edges.bundle import Edges, ProbeTimed
from ..._errors import UnknownInstance
from ..._events import Event, ProcessExited
from ..._models.registry import ModelRegistry
from ..._policy.admission import Plan
from ..._status import InstanceStatus
from ..._stop_reasons import StopReason
from ..mailbox import Crash, Crashed, Mailbox, ScopeGroup, StatusSlot, scoped
from ..messages import ReplyTo, answer, refuse
from .effects import (
    Answer,
    AnswerStatus,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    ConfirmAdopted,
    Effect,
    Emit,
    EndActor,
    EndProcessWatch,
    ForgetWatches,
    NoteProbeTime,
    Refuse,
    Spawn,
    StartWatchdog,
    StopReadingLines,
    Terminate,
    TimeReadiness,
    WatchAdopted,
    WatchProcess,
)
from .exposure import ExposureWatch
from .messages import NOTHING_SEEN, Probed, Seen, ShutdownDone, SpawnFailed
from .probing import Probing
from .process_life import ProcessLife
from .progress import report_loading
from .state import Setup, State
from .status import status_of
from .step import Message, step
from .stopping import CRASH_GRACE_S as CRASH_GRACE_S

EMERGENCY_GRACE_S = 5.0
"""Grace for a server still running when the actor is torn down without an unload."""


def caller_gone(reply: ReplyTo[Any]) -> bool:
    """Whether the caller waiting on ``reply`` gave up (its receiving end is closed): a
    trio caller that is cancelled closes it (``messages.call``)."""
    return reply.statistics().open_receive_channels == 0


@attrs.define(eq=False)
class InstanceActor:
    """One instance: its plan, its process (when managed) and its reported status.

    Create with `InstanceActor.create`, run with ``nursery.start_soon(actor.serve)``, and
    talk to it only through `inbox` with the commands of ``_actors/messages.py``.
    """

    instance_id: str
    runtime_id: str
    plan: Plan
    instance_dir: Path | None
    _box: Mailbox
    _edges: Edges
    _life: ProcessLife
    _probing: Probing
    _exposure: ExposureWatch
    _state: State
    _process_tasks: ScopeGroup | None = None
    _adopted_tasks: ScopeGroup | None = None
    _loading: trio.CancelScope | None = None
    """The `report_loading` task of a process that does not serve yet (``progress.py``)."""

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
        tick_phase: float = 0.0,
    ) -> InstanceActor:
        """A new actor in state Loaded; nothing runs until `serve` is started. ``registry``
        checks the model's pins at every spawn (None: a bare actor pins nothing); ``slot``
        is where it publishes its status (the runtime's status board); ``tick_phase`` is the
        phase of its running probes and refreshes on the runtime's grid
        (`probe_schedule.probe_phase`)."""
        box = Mailbox.create(instance_id, events, slot)
        ring = edges.logs.ring(instance_id, config.managed)
        post = box.inbox
        life = ProcessLife(plan, edges, post, registry, ring, box.emit, instance_id)
        admitted_at = trio.current_time() if plan.admitted is not None else None
        probing = Probing(plan, config, edges, post, admitted_at, tick_phase)
        exposure = ExposureWatch(plan, edges, post, tick_phase)
        state = State.initial(Setup.of(instance_id, runtime_id, plan))
        actor = cls(
            instance_id, runtime_id, plan, instance_dir, box, edges, life, probing, exposure, state
        )
        if plan.admitted is not None:  # adopted: what the load's probe found, until watched
            actor._take(Probed(plan.admitted, None))
        box.slot.publish(actor._status())  # on the board once accepted; an event at its 1st message
        return actor

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where commands for this actor go."""
        return self._box.inbox

    @property
    def managed(self) -> bool:
        """Whether inferactors runs this server's process."""
        return self._state.managed

    async def serve(self) -> None:
        """Run the actor until it is unloaded or cancelled.

        On cancellation a server that still runs is killed (its whole process group,
        SIGTERM then SIGKILL after `EMERGENCY_GRACE_S`, shielded and bounded) so no server
        outlives its actor. Commands left in the inbox are answered with `UnknownInstance`.
        """
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
        seen = self._seen(message)
        self._state, effects = step(self._state, message, trio.current_time(), seen)
        for effect in effects:
            self._carry_out(effect)

    def _seen(self, message: Message) -> Seen:
        """What the rules need of the live world as ``message`` is taken."""
        process = self._state.process
        callers = [*self._state.start_callers]
        reply = getattr(message, "reply", None)
        if isinstance(reply, trio.MemorySendChannel):
            callers.append(reply)
        if process is None and not callers:
            return NOTHING_SEEN  # an adopted server's probe: nothing live to read
        return Seen(
            running=process.running if process is not None else True,
            fatal=process.lines.fatal if process is not None else None,
            gone=frozenset(caller for caller in callers if caller_gone(caller)),
        )

    def _carry_out(self, effect: Effect) -> None:
        box = self._box
        match effect:
            case Answer():
                answer(effect.reply, effect.value)
            case Refuse():
                refuse(effect.reply, effect.error)
            case AnswerStatus():
                answer(effect.reply, self._status())
            case Emit():
                box.emit(effect.event)
            case Spawn():
                failed = partial(SpawnFailed, reply=effect.reply)  # if the worker crashes
                box.finish(
                    self._life.spawn, box.nursery, effect.reply, effect.held, fallback=failed
                )
            case Terminate():
                box.finish(self._life.stop, effect.process, effect.grace_s)
            case WatchProcess():
                self._watch_process(effect)
            case TimeReadiness():
                if self._process_tasks is not None:
                    timer = self._life.readiness_timer
                    scope, watched = self._process_tasks.new(), effect.process
                    box.soon(scoped, scope, timer, watched, effect.timeout_s, effect.deadline)
            case EndProcessWatch():
                self._end_process_watch()
            case WatchAdopted():
                self._adopted_tasks = ScopeGroup()
                box.soon(self._probing.monitor, None, self._adopted_tasks.new())
            case ForgetWatches():
                self._end_process_watch()
                if self._adopted_tasks is not None:
                    self._adopted_tasks.cancel()
                    self._adopted_tasks = None
            case StartWatchdog():
                self._start_watchdog(effect)
            case StopReadingLines():
                effect.process.lines.stop()
            case NoteProbeTime():
                self._edges.on_probe(ProbeTimed(self.instance_id, effect.latency_s, effect.at))
            case CheckHealth():
                box.soon(self._probing.health, effect.process, effect.reply)
            case CheckDeepHealth():
                box.soon(self._probing.deep_health, effect.process, effect.reply)
            case ConfirmAdopted():
                box.soon(self._probing.confirm_adopted, effect.reply)
            case CloseDown():
                done = ShutdownDone(effect.reply)  # if the shutdown worker itself crashes
                work, process, grace_s = self._life.shutdown, effect.process, effect.grace_s
                directory, reply = self.instance_dir, effect.reply
                box.finish(work, process, grace_s, directory, reply, fallback=lambda _: done)
            case EndActor():
                box.close()

    def _watch_process(self, effect: WatchProcess) -> None:
        """Start the tasks that watch a process that just started; they end together."""
        self._end_process_watch()
        process, box = effect.process, self._box
        group = self._process_tasks = ScopeGroup()
        box.finish(self._life.watch_exit, process)
        box.soon(self._probing.monitor, process, group.new())
        box.soon(self._exposure.exposure_watch, process, group.new(), effect.pins)
        box.soon(scoped, group.new(), self._life.watch_startup, process)
        timeout = self.plan.supervision.readiness_timeout_s
        if timeout is not None:
            box.soon(scoped, group.new(), self._life.readiness_timer, process, timeout)
        self._loading = group.new()
        model = self.plan.model.name if self.plan.model is not None else self.instance_id
        load = (box.emit, self.instance_id, model, process.started_at)
        box.soon(scoped, self._loading, report_loading, *load)

    def _end_process_watch(self) -> None:
        if self._process_tasks is not None:
            self._process_tasks.cancel()
            self._process_tasks = None

    def _start_watchdog(self, effect: StartWatchdog) -> None:
        watchdog = self.plan.supervision.watchdog
        group = self._process_tasks if effect.process is not None else self._adopted_tasks
        if watchdog is not None and group is not None:
            self._box.soon(self._probing.watchdog, effect.process, watchdog, group.new())

    def _status(self) -> InstanceStatus:
        process = self._state.process
        escaped = process.escaped if process is not None else ()
        return status_of(self._state, trio.current_time(), escaped)

    def _report(self) -> None:
        status = self._status()
        if self._loading is not None and (status.serving or self._state.process is None):
            self._loading.cancel()  # it serves (or its process is gone): the load is over
            self._loading = None
        self._box.report(status)

    async def _teardown(self) -> None:
        process = self._state.process
        if process is not None and process.running:
            with trio.move_on_after(EMERGENCY_GRACE_S + 3.0, shield=True):
                await process.terminate(EMERGENCY_GRACE_S)
            process.kill_group_now()
            now = trio.current_time()
            self._box.emit(
                ProcessExited(self.instance_id, process.pid, None, None, StopReason.SHUTDOWN, now)
            )
        gone = UnknownInstance(f"{self.instance_id} was unloaded before it answered")
        for reply in self._state.callers():
            refuse(reply, gone)
        self._box.drain()
        self._edges.logs.release(self.instance_id)  # its file's thread and descriptor
