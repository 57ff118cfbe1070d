"""The supervisor actor: owns the instance actors and routes commands to them.

It keeps the instance table (the only writer of it), refuses a second instance on an
ip:port that a managed instance uses (checklist item 30), forwards each instance command to
its actor's inbox in arrival order, and fans the actors' events out to subscribers.
Everything it does is synchronous except receiving, so it never stalls behind an instance.
"""

from __future__ import annotations

from typing import assert_never

import attrs
import trio

from ._config import ControlMode
from ._errors import BackendError, InvalidState, UnknownInstance
from ._events import Event
from ._instance import InstanceActor
from ._messages import (
    ListInstances,
    Load,
    PlanOf,
    Route,
    Shutdown,
    Subscribe,
    SupervisorCommand,
    Unload,
    answer,
    refuse,
)

INBOX_SIZE = 64
EVENT_BUFFER = 1024
UNLOAD_GRACE_S = 5.0
"""Grace given to a managed server stopped by an unload (seed-behaviour section 4)."""


@attrs.define(eq=False)
class Supervisor:
    """Owns every instance actor of one runtime; create with `Supervisor.create`."""

    _inbox_send: trio.MemorySendChannel[object]
    _inbox_recv: trio.MemoryReceiveChannel[object]
    _events_send: trio.MemorySendChannel[Event]
    _events_recv: trio.MemoryReceiveChannel[Event]
    _actors: dict[str, InstanceActor] = attrs.Factory(dict)
    _subscribers: list[trio.MemorySendChannel[Event]] = attrs.Factory(list)
    _nursery: trio.Nursery | None = None
    dropped_events: int = 0

    @classmethod
    def create(cls) -> Supervisor:
        inbox_send, inbox_recv = trio.open_memory_channel[object](INBOX_SIZE)
        events_send, events_recv = trio.open_memory_channel[Event](EVENT_BUFFER)
        return cls(inbox_send, inbox_recv, events_send, events_recv)

    @property
    def inbox(self) -> trio.MemorySendChannel[object]:
        """Where the runtime facade sends `SupervisorCommand` messages."""
        return self._inbox_send

    @property
    def events(self) -> trio.MemorySendChannel[Event]:
        """Where instance actors send their events."""
        return self._events_send

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; the instance actors run in this actor's nursery."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._fan_out)
            task_status.started()
            async for command in self._inbox_recv:
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
                send, receive = trio.open_memory_channel[Event](command.buffer)
                self._subscribers.append(send)
                answer(command.reply, receive)
            case _:
                assert_never(command)

    def _on_load(self, command: Load) -> None:
        actor = command.instance
        assert isinstance(actor, InstanceActor)
        if actor.instance_id in self._actors:
            refuse(command.reply, InvalidState(f"{actor.instance_id} is already loaded"))
            return
        clash = self._port_clash(actor)
        if clash is not None:
            refuse(command.reply, InvalidState(clash))
            return
        self._actors[actor.instance_id] = actor
        assert self._nursery is not None
        self._nursery.start_soon(actor.serve)
        answer(command.reply, None)

    def _port_clash(self, actor: InstanceActor) -> str | None:
        spec = actor.plan.spec
        for other in self._actors.values():
            either_managed = ControlMode.MANAGED in (actor.plan.mode, other.plan.mode)
            same = (other.plan.spec.bind_ip(), other.plan.spec.port()) == (
                spec.bind_ip(),
                spec.port(),
            )
            if either_managed and same:
                return (
                    f"{spec.base_url()} is already used by another instance ({other.instance_id})"
                )
        return None

    def _on_route(self, route: Route) -> None:
        actor = self._actors.get(route.instance_id)
        if actor is None:
            refuse(route.command.reply, _unknown(route.instance_id))
            return
        self._forward(actor, route.command)

    def _on_unload(self, command: Unload) -> None:
        actor = self._actors.pop(command.instance_id, None)
        if actor is None:
            refuse(command.reply, _unknown(command.instance_id))
            return
        self._forward(actor, Shutdown(UNLOAD_GRACE_S, command.reply))

    def _forward(self, actor: InstanceActor, command: object) -> None:
        try:
            actor.inbox.send_nowait(command)
        except trio.WouldBlock:
            busy = BackendError(f"{actor.instance_id} has {INBOX_SIZE} commands waiting; try again")
            refuse(command.reply, busy)  # type: ignore[attr-defined]
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            refuse(command.reply, _unknown(actor.instance_id))  # type: ignore[attr-defined]

    async def _fan_out(self) -> None:
        async for event in self._events_recv:
            for subscriber in list(self._subscribers):
                try:
                    subscriber.send_nowait(event)
                except trio.WouldBlock:
                    self.dropped_events += 1
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    self._subscribers.remove(subscriber)


def _unknown(instance_id: str) -> UnknownInstance:
    return UnknownInstance(f"no instance {instance_id} is loaded")
