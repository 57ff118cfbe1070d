"""Commands, replies and the request/reply helper of the actor tree.

A caller sends a frozen command carrying a fresh reply channel and awaits exactly one
`Reply` on it; the actor answers every command it receives, with a value or a typed error.
Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import trio

from .._edges.capture import RunEvidence
from .._errors import BackendError, InferactorsError
from .._events import Event
from .._policy.admission import Plan
from .._policy.probe_report import CompletionResult, ServerReport
from .._status import InstanceStatus
from .._stop_reasons import StopReason
from .status_board import StatusSlot

T = TypeVar("T")


@attrs.frozen
class Reply(Generic[T]):
    """One answer: ``value`` when ``error`` is None."""

    value: T | None = None
    error: InferactorsError | None = None

    def unwrap(self) -> T:
        """Return the value, or raise the error the actor answered with."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # T may itself be None


ReplyTo = trio.MemorySendChannel[Reply[T]]


def answer(reply: ReplyTo[T], value: T) -> None:
    """Send ``value`` and close the reply channel (its buffer of one never blocks). A caller
    that stopped waiting (it timed out or was cancelled) is not an error: the answer drops."""
    _send(reply, Reply(value=value))


def refuse(reply: ReplyTo[Any], error: InferactorsError) -> None:
    """Send ``error`` and close the reply channel; dropped if the caller stopped waiting."""
    _send(reply, Reply(error=error))


def _send(reply: ReplyTo[Any], message: Reply[Any]) -> None:
    with reply:
        try:
            reply.send_nowait(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            pass  # nobody waits for this answer any more


async def call(inbox: trio.MemorySendChannel[object], make: Callable[[ReplyTo[T]], object]) -> T:
    """Send the command ``make(reply_channel)`` to ``inbox`` and return its answer.

    Raises:
        BackendError: the actor stopped before it answered.
        InferactorsError: whatever the actor answered with.
    """
    send, receive = trio.open_memory_channel[Reply[T]](1)
    with receive:
        try:
            await inbox.send(make(send))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise BackendError("the runtime is closed") from None
        try:
            reply = await receive.receive()
        except trio.EndOfChannel:
            raise BackendError("the instance actor stopped before it answered") from None
    return reply.unwrap()


# Commands to an instance actor (routed by the supervisor).


@attrs.frozen
class Start:
    reply: ReplyTo[None]


@attrs.frozen
class Stop:
    """Stop the server: TERM its group, KILL it after ``grace_s`` seconds; the answer is
    its exit's evidence. ``reason`` is what its `ProcessExited` reports: ``requested`` (an
    operator), or the front door's ``ttl``, ``evicted``, ``reload``, ``shutdown``; any stop
    leaves the server stopped until the next start (never restarted)."""

    grace_s: float
    reply: ReplyTo[RunEvidence]
    reason: StopReason = StopReason.REQUESTED


@attrs.frozen
class GetStatus:
    reply: ReplyTo[InstanceStatus]


@attrs.frozen
class GetHealth:
    reply: ReplyTo[ServerReport]


@attrs.frozen
class DeepHealth:
    reply: ReplyTo[CompletionResult]


@attrs.frozen
class Shutdown:
    """Stop the server if it runs (grace ``grace_s``), then end the actor (unload)."""

    grace_s: float
    reply: ReplyTo[None]


@attrs.frozen
class Restart:
    """The supervisor's restart of a crashed server (restart ``attempt``); refused when the
    operator stopped it meanwhile, when it runs, or when it was stopped for exposure."""

    attempt: int
    reply: ReplyTo[None]


@attrs.frozen
class Annotate:
    """The supervisor tells the instance what it is doing about it, for status."""

    supervision: str | None
    restarts: int
    reply: ReplyTo[None]
    gave_up: bool = False
    """The supervisor gave up on it: no restart comes until an operator's start."""


InstanceCommand = Start | Stop | GetStatus | GetHealth | DeepHealth | Shutdown | Restart | Annotate


# Commands to the supervisor.


@attrs.frozen
class Load:
    instance: object  # an _instance.InstanceActor, not yet serving
    reply: ReplyTo[None]
    slot: StatusSlot | None = None  # where it publishes; shown on the board once accepted


@attrs.frozen
class Route:
    instance_id: str
    command: InstanceCommand


@attrs.frozen
class Unload:
    instance_id: str
    reply: ReplyTo[None]


@attrs.frozen
class PlanOf:
    instance_id: str
    reply: ReplyTo[Plan]


@attrs.frozen
class ListInstances:
    reply: ReplyTo[tuple[str, ...]]


@attrs.frozen
class Subscribe:
    """Open an event stream; the answer is its receiving end."""

    buffer: int
    reply: ReplyTo[trio.MemoryReceiveChannel[Event]]


@attrs.frozen
class ResetRestarts:
    """Refill an instance's restart budget (the operator's explicit start; item 56)."""

    instance_id: str
    reply: ReplyTo[None]


@attrs.frozen
class Notify:
    """An event from an instance actor, delivered through the supervisor's inbox."""

    event: Event


@attrs.frozen
class RestartDone:
    """A scheduled restart finished: ``error`` is None when the server was started again."""

    instance_id: str
    attempt: int
    error: InferactorsError | None


SupervisorCommand = (
    Load
    | Route
    | Unload
    | PlanOf
    | ListInstances
    | Subscribe
    | ResetRestarts
    | Notify
    | RestartDone
)
