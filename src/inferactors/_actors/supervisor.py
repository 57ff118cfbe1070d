"""The supervisor actor: owns the instance actors, routes commands, enforces restarts.

It keeps the instance table and, through `Restarts` (``restarts.py``), every instance's
restart budget (the only writer of both), refuses a second instance on an ip:port that a
managed instance uses, forwards each instance command to its actor's inbox in arrival
order, and fans events out to subscribers. Events from instance actors reach it through its
own inbox (`Notify`, ``event_relay.py``), so it decides about a crash the moment the exit is
observed, with no caller's poll. Every handler is synchronous; restarts wait in their own
tasks. It keeps the status board (``status_board``) with its table: attached at load,
detached at unload.

A crash stays inside its instance (OTP's one_for_one): an instance actor contains the
exceptions of its loop and workers itself (``mailbox``); a managed server it stops reports
reason ``error`` and is restarted like a crash, and an adopted instance's `InstanceCrashed`
restarts its watching under the same policy. An actor that dies all the same is published
as crashed and forgotten, never taking the supervisor with it.
"""

from __future__ import annotations

import random as random_module
from collections.abc import Callable
from typing import Protocol, assert_never

import attrs
import trio

from .._config.binding import hosts_collide, spec_host
from .._config.config import ControlMode
from .._errors import BackendError, InvalidState, UnknownInstance
from .._events import Event
from .._policy.admission import Plan
from .event_relay import EVENT_BUFFER, relay_events
from .mailbox import Crash
from .messages import (
    Annotate,
    ListInstances,
    Load,
    Notify,
    PlanOf,
    Reply,
    ResetRestarts,
    RestartDone,
    Route,
    Shutdown,
    Start,
    Stop,
    Subscribe,
    SupervisorCommand,
    Unload,
    answer,
    refuse,
)
from .overload_report import report_overloads
from .restarts import Restarts
from .status_board import StatusBoard
from .subscribers import Subscribers


class Actor(Protocol):
    """What the supervisor needs of an instance actor (`Actor`, the Ollama actor)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def inbox(self) -> trio.MemorySendChannel[object]: ...

    async def serve(self) -> None: ...


INBOX_SIZE = 64
UNLOAD_GRACE_S = 5.0
"""Grace given to a managed server stopped by an unload."""


@attrs.define(eq=False)
class Supervisor:
    """Owns every instance actor of one runtime; create with `Supervisor.create`."""

    _inbox_send: trio.MemorySendChannel[object]
    _inbox_recv: trio.MemoryReceiveChannel[object]
    _events_send: trio.MemorySendChannel[Event]
    _events_recv: trio.MemoryReceiveChannel[Event]
    _random: Callable[[], float]
    _actors: dict[str, Actor] = attrs.Factory(dict)
    _subscribers: Subscribers = attrs.Factory(Subscribers)
    _nursery: trio.Nursery | None = None
    board: StatusBoard = attrs.Factory(StatusBoard)
    """Every loaded instance's published status (`status_board`), kept with the table."""
    _restarts: Restarts = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._restarts = Restarts(
            self._random,
            self._inbox_send,
            self._publish,
            self._show,
            self._adopted,
            self._nursery_or_fail,
        )

    @classmethod
    def create(cls, *, random: Callable[[], float] = random_module.random) -> Supervisor:
        """A supervisor; ``random`` (values in [0, 1)) drives the restart jitter."""
        inbox_send, inbox_recv = trio.open_memory_channel[object](INBOX_SIZE)
        events_send, events_recv = trio.open_memory_channel[Event](EVENT_BUFFER)
        return cls(inbox_send, inbox_recv, events_send, events_recv, random)

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where the runtime facade sends `SupervisorCommand` messages."""
        return self._inbox_send

    @property
    def events(self) -> trio.MemorySendChannel[Event]:
        """Where instance actors send their events."""
        return self._events_send

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; the instance actors run in this actor's nursery.

        When it ends, later commands fail at once ("the runtime is closed") and every
        subscriber's event stream ends.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(relay_events, self._events_recv, self._inbox_send)
                nursery.start_soon(report_overloads, self.board, self._publish)
                task_status.started()
                async for command in self._inbox_recv:
                    self._dispatch(command)  # type: ignore[arg-type]  # only commands arrive
                    self._dispatch_queued()
        finally:
            self._inbox_recv.close()
            self.board.close()
            self._subscribers.close()

    def _dispatch_queued(self) -> None:
        """Handle every command already queued, in order, in the same pass through the
        scheduler: one command per pass made the supervisor the bottleneck of a loaded
        loop (a thousand adopted servers admitted at once: their loads, starts and events
        came through at one per loop iteration, a few a second while the loop lagged)."""
        for _ in range(INBOX_SIZE):
            try:
                command = self._inbox_recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            self._dispatch(command)  # type: ignore[arg-type]  # only commands arrive

    def _dispatch(self, command: SupervisorCommand) -> None:
        match command:
            case Load():
                self._on_load(command)
            case Route():
                self._on_route(command)
            case Unload():
                self._on_unload(command)
            case PlanOf():
                actor = self._actors.get(command.instance_id)
                if actor is None:
                    refuse(command.reply, _unknown(command.instance_id))
                else:
                    answer(command.reply, actor.plan)
            case ListInstances():
                answer(command.reply, tuple(self._actors))
            case Subscribe():
                answer(command.reply, self._subscribers.open(command.buffer))
            case ResetRestarts():
                self._on_reset(command)
            case Notify():
                self._publish(command.event)
                self._restarts.on_event(command.event)
            case RestartDone():
                self._restarts.on_done(command)
            case _:
                assert_never(command)

    # The instance table.

    def _on_load(self, command: Load) -> None:
        actor: Actor = command.instance  # type: ignore[assignment]  # Load carries an Actor
        if actor.instance_id in self._actors:
            refuse(command.reply, InvalidState(f"{actor.instance_id} is already loaded"))
            return
        clash = self._port_clash(actor)
        if clash is not None:
            refuse(command.reply, InvalidState(clash))
            return
        self._actors[actor.instance_id] = actor
        self._restarts.add(actor.instance_id, actor.plan.restart_policy)
        if command.slot is not None:
            self.board.attach(actor.instance_id, command.slot)
        self._nursery_or_fail().start_soon(self._serve_actor, actor)
        answer(command.reply, None)

    async def _serve_actor(self, actor: Actor) -> None:
        """Run ``actor``. If it dies of an exception it could not contain, only it goes: the
        crash is published and its id forgotten (it may be loaded again); the supervisor
        and the other instances go on."""
        try:
            await actor.serve()
        except Exception as error:  # the last net of "let it crash": never the runtime
            self._publish(Crash.of(error, "the actor").event(actor.instance_id))
            if self._actors.get(actor.instance_id) is actor:  # sync: one writer at a time
                del self._actors[actor.instance_id]
                self.board.detach(actor.instance_id)
                self._restarts.forget(actor.instance_id)

    def _port_clash(self, actor: Actor) -> str | None:
        """Another instance whose server would take the same sockets, by the one rule of
        `hosts_collide` (the run file's check uses it too), when either one is managed."""
        spec = actor.plan.spec
        for other in self._actors.values():
            either_managed = ControlMode.MANAGED in (actor.plan.mode, other.plan.mode)
            theirs = other.plan.spec
            if (
                either_managed
                and theirs.port() == spec.port()
                and hosts_collide(spec_host(theirs), spec_host(spec))
            ):
                return (
                    f"{spec.base_url()} is already used by another instance ({other.instance_id})"
                )
        return None

    def _on_route(self, route: Route) -> None:
        actor = self._actors.get(route.instance_id)
        if actor is None:
            refuse(route.command.reply, _unknown(route.instance_id))
            return
        pending = self._restarts.pending(route.instance_id)
        if isinstance(route.command, Start | Stop | Shutdown):
            # the operator's word wins over a timer
            self._restarts.cancel_pending(route.instance_id)
        self._forward(actor, route.command)
        if pending and isinstance(route.command, Stop):
            self._restarts.note(route.instance_id, None)  # no restart comes: the note is gone

    def _on_unload(self, command: Unload) -> None:
        actor = self._actors.pop(command.instance_id, None)
        if actor is None:
            refuse(command.reply, _unknown(command.instance_id))
            return
        self._restarts.forget(command.instance_id)
        self.board.detach(command.instance_id)
        self._forward(actor, Shutdown(UNLOAD_GRACE_S, command.reply))

    def _forward(self, actor: Actor, command: object) -> None:
        try:
            actor.inbox.send_nowait(command)
        except trio.WouldBlock:
            busy = BackendError(f"{actor.instance_id} has {INBOX_SIZE} commands waiting; try again")
            refuse(command.reply, busy)  # type: ignore[attr-defined]
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            refuse(command.reply, _unknown(actor.instance_id))  # type: ignore[attr-defined]

    # Restarts (OTP restart types and intensity: ``restarts.py``).

    def _on_reset(self, command: ResetRestarts) -> None:
        if self._restarts.reset(command.instance_id):
            answer(command.reply, None)
        else:
            refuse(command.reply, _unknown(command.instance_id))

    def _adopted(self, iid: str) -> bool:
        actor = self._actors.get(iid)
        return actor is not None and actor.plan.mode is ControlMode.ADOPTED

    def _show(self, iid: str, note: str | None, attempts: int, gave_up: bool) -> None:
        actor = self._actors.get(iid)
        if actor is None:
            return
        self.board.annotate(iid, note, attempts)  # readers see it before the actor
        send, _unread = trio.open_memory_channel[Reply[None]](1)  # nobody waits for it
        self._forward(actor, Annotate(note, attempts, send, gave_up))

    # Events.

    @property
    def dropped_events(self) -> int:
        """Events dropped for a subscriber that fell behind, in all (`subscribers`)."""
        return self._subscribers.dropped

    def _publish(self, event: Event) -> None:
        self._subscribers.publish(event)

    def _nursery_or_fail(self) -> trio.Nursery:
        if self._nursery is None:
            raise BackendError("the supervisor is not serving")
        return self._nursery


def _unknown(instance_id: str) -> UnknownInstance:
    return UnknownInstance(f"no instance {instance_id} is loaded")
