"""The plumbing every actor shares: a bounded inbox, a nursery for its workers, an event
outlet, and the groups of cancel scopes that end a process's tasks together.

An actor owns one `Mailbox` and gives it a synchronous handler: `Mailbox.run` feeds the
handler one message at a time, never concurrently, so the handler is the only writer of
the actor's state (design/actors.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .._errors import BackendError, UnknownInstance
from .._events import Event, StateChanged
from .._status import InstanceState, InstanceStatus
from .messages import refuse

INBOX_SIZE = 64
"""Commands and internal results waiting for the loop; the loop never blocks, so this is ample."""


@attrs.define(eq=False)
class Mailbox:
    """An actor's inbox, nursery and event outlet; create with `Mailbox.create`."""

    name: str
    _events: trio.MemorySendChannel[Event]
    inbox: trio.MemorySendChannel[object]
    _receive: trio.MemoryReceiveChannel[object]
    _nursery: trio.Nursery | None = None
    _reported: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)

    @classmethod
    def create(cls, name: str, events: trio.MemorySendChannel[Event]) -> Mailbox:
        """A mailbox for the actor ``name`` whose events go to ``events``."""
        send, receive = trio.open_memory_channel[object](INBOX_SIZE)
        return cls(name, events, send, receive)

    async def run(self, handle: Callable[[object], None]) -> None:
        """Feed every message to ``handle`` until `close` is called or the task is cancelled;
        the workers started with `soon` run inside and end with it."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            async for message in self._receive:
                handle(message)

    @property
    def nursery(self) -> trio.Nursery:
        """The actor's nursery (for edges that start tasks of their own, like a process's
        output pump).

        Raises:
            BackendError: the actor is not running.
        """
        if self._nursery is None:
            raise BackendError(f"{self.name}: the actor is not serving")
        return self._nursery

    def soon(self, job: Callable[..., Awaitable[Any]], *args: object) -> None:
        """Start ``job(*args)`` as a worker of this actor. If the worker ends without
        finishing (the actor was unloaded or cancelled), every reply channel among ``args``
        is closed, so its caller learns at once that no answer will come."""
        self.nursery.start_soon(_closing_replies_on_failure, job, args)

    def close(self) -> None:
        """End `run`: the loop stops and every worker is cancelled."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def emit(self, event: Event) -> None:
        """Send ``event`` to the supervisor without ever waiting for it."""
        try:
            self._events.send_nowait(event)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the supervisor is gone or swamped; the actor never waits for it

    def report(self, status: InstanceStatus) -> None:
        """Emit `StateChanged` when ``status``'s state or detail differs from the last one."""
        old = self._reported
        if (old.state, old.detail) != (status.state, status.detail):
            self._reported = status
            now = trio.current_time()
            self.emit(StateChanged(self.name, old.state, status.state, status.detail, now))

    def drain(self) -> None:
        """Answer every command still queued with `UnknownInstance` (nobody waits forever)."""
        while True:
            try:
                message = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            reply = getattr(message, "reply", None)
            if isinstance(reply, trio.MemorySendChannel):
                refuse(reply, UnknownInstance(f"{self.name} is no longer loaded"))


async def _closing_replies_on_failure(
    job: Callable[..., Awaitable[Any]], args: tuple[object, ...]
) -> None:
    try:
        await job(*args)
    except BaseException:
        for arg in args:
            if isinstance(arg, trio.MemorySendChannel):
                arg.close()
        raise


@attrs.define
class ScopeGroup:
    """Cancel scopes of the tasks that live as long as one process (or one adoption)."""

    _scopes: list[trio.CancelScope] = attrs.Factory(list)

    def new(self) -> trio.CancelScope:
        """A fresh scope for one task, cancelled by `cancel` (even if not entered yet)."""
        scope = trio.CancelScope()
        self._scopes.append(scope)
        return scope

    def cancel(self) -> None:
        """Cancel every task of the group."""
        for scope in self._scopes:
            scope.cancel()


async def scoped(
    scope: trio.CancelScope, job: Callable[..., Awaitable[Any]], *args: object
) -> None:
    """Run ``job(*args)`` inside ``scope``."""
    with scope:
        await job(*args)
