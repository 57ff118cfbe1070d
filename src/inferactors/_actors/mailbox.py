"""The plumbing every actor shares: a bounded inbox, a nursery for its workers, an event
outlet, and the groups of cancel scopes that end a process's tasks together.

An actor owns one `Mailbox` and gives it a synchronous handler: `Mailbox.run` feeds the
handler one message at a time, never concurrently, so the handler is the only writer of
the actor's state (design/actors.md).

"Let it crash" (OTP) lives here too: an ``Exception`` raised by the handler or by a worker
is caught at this boundary and becomes a `Crash` of this actor alone; the actor's crash
handler resets it, and nothing above it (supervisor, runtime, sibling actors) sees the
exception. `trio.Cancelled`, `KeyboardInterrupt` and `SystemExit` are never caught.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .._errors import BackendError, InferactorsError, UnknownInstance
from .._events import Event, InstanceCrashed, StateChanged
from .._status import InstanceState, InstanceStatus
from .messages import ReplyTo, refuse
from .status_board import StatusSlot as StatusSlot  # re-exported: the actors' slot type

INBOX_SIZE = 64
"""Commands and internal results waiting for the loop; the loop never blocks, so this is ample."""

CRASH_MESSAGE_CHARS = 200
"""Longest exception message a `Crash` (and its `InstanceCrashed` event) carries."""


@attrs.frozen
class Crash:
    """An exception nobody foresaw inside one actor: its type, message and where it arose."""

    error_type: str
    message: str
    where: str

    @classmethod
    def of(cls, error: BaseException, where: str) -> Crash:
        """Name ``error`` (the first leaf of an exception group) by its type and its message
        on one line, cut to `CRASH_MESSAGE_CHARS` characters."""
        leaf, others = _first_leaf(error)
        text = " ".join(_text_of(leaf).split())
        if others:
            text = f"{text} (and {others} more exceptions)"
        if len(text) > CRASH_MESSAGE_CHARS:
            text = text[: CRASH_MESSAGE_CHARS - 3] + "..."
        return cls(type(leaf).__name__, text, where)

    def describe(self) -> str:
        """``"ValueError: bad value"`` (the type alone when there is no message)."""
        return f"{self.error_type}: {self.message}" if self.message else self.error_type

    def error(self, name: str) -> BackendError:
        """What a caller of the crashed actor ``name`` is answered with."""
        return BackendError(f"{name} crashed in {self.where} ({self.describe()})")

    def event(self, name: str) -> InstanceCrashed:
        """The `InstanceCrashed` event of the actor ``name``, stamped now."""
        now = trio.current_time()
        return InstanceCrashed(name, self.error_type, self.message, self.where, now)


@attrs.frozen
class Crashed:
    """An actor crashed (an exception nobody foresaw in its loop or a worker): the mailbox
    emitted `InstanceCrashed`, cancelled the cancellable workers and answered their callers;
    the actor's rules reset it (a message to its ``step``)."""

    crash: Crash


@attrs.frozen
class _WorkerCrashed:
    """Posted by a worker that raised; the loop resets the actor when it takes it."""

    crash: Crash


@attrs.define(eq=False)
class Mailbox:
    """An actor's inbox, nursery and event outlet; create with `Mailbox.create`."""

    name: str
    _events: trio.MemorySendChannel[Event]
    inbox: trio.MemorySendChannel[object]
    _receive: trio.MemoryReceiveChannel[object]
    _nursery: trio.Nursery | None = None
    _workers: dict[trio.CancelScope, tuple[ReplyTo[Any], ...]] = attrs.Factory(dict)
    _reported: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)
    slot: StatusSlot = attrs.Factory(StatusSlot)
    """Where every `report` publishes the actor's whole view (the runtime's status board)."""

    @classmethod
    def create(
        cls, name: str, events: trio.MemorySendChannel[Event], slot: StatusSlot | None = None
    ) -> Mailbox:
        """A mailbox for the actor ``name`` whose events go to ``events`` and whose status
        goes to ``slot`` (a fresh one, on no board, when None)."""
        send, receive = trio.open_memory_channel[object](INBOX_SIZE)
        return cls(name, events, send, receive, slot=slot or StatusSlot())

    async def run(self, handle: Callable[[object], None], crashed: Callable[[Crash], None]) -> None:
        """Feed every message to ``handle`` until `close` is called or the task is cancelled;
        the workers started with `soon` and `finish` run inside and end with it.

        An ``Exception`` from ``handle`` or from a worker crashes this actor only: the
        message's caller and the callers of every `soon` worker are answered with a
        `BackendError` naming the crash, those workers are cancelled (`finish` workers go
        on), `InstanceCrashed` is emitted, and ``crashed`` (called in the loop, like
        ``handle``) resets the actor. The loop then goes on with the next message.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            async for message in self._receive:
                if isinstance(message, _WorkerCrashed):
                    self._crash(message.crash, crashed)
                    continue
                try:
                    handle(message)
                except Exception as error:  # let it crash: this actor, not the runtime
                    crash = Crash.of(error, f"its loop, handling {type(message).__name__}")
                    _refuse_reply(message, crash.error(self.name))
                    self._crash(crash, crashed)

    def _crash(self, crash: Crash, crashed: Callable[[Crash], None]) -> None:
        error = crash.error(self.name)
        workers, self._workers = self._workers, {}
        for scope, replies in workers.items():
            scope.cancel()
            for reply in replies:
                refuse(reply, error)
        self.emit(crash.event(self.name))
        crashed(crash)

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
        """Start ``job(*args)`` as a worker of this actor that a crash of the actor cancels
        (probes, watches, health checks: work that changes nothing outside).

        If the worker ends without finishing (the actor was unloaded or cancelled), every
        reply channel among ``args`` is closed, so its caller learns at once that no answer
        will come; if it raises an ``Exception``, its callers get a `BackendError` naming
        it and the actor crashes (see `run`).
        """
        scope = trio.CancelScope()
        self._workers[scope] = _replies_in(args)
        self.nursery.start_soon(self._worker, job, args, scope)

    def finish(
        self,
        job: Callable[..., Awaitable[Any]],
        *args: object,
        fallback: Callable[[BackendError], object] | None = None,
    ) -> None:
        """Start ``job(*args)`` as a worker that a crash of the actor lets finish: it changes
        the world (spawns, stops, unloads, awaits an exit) and posts what it did, which
        the reset actor still needs. Otherwise as `soon`; if it raises, ``fallback`` (when
        given) makes the result it never posted from the error its callers got, and that is
        posted before the crash."""
        self.nursery.start_soon(self._worker, job, args, trio.CancelScope(), fallback)

    async def _worker(
        self,
        job: Callable[..., Awaitable[Any]],
        args: tuple[object, ...],
        scope: trio.CancelScope,
        fallback: Callable[[BackendError], object] | None = None,
    ) -> None:
        try:
            with scope:
                await job(*args)
        except Exception as error:  # let it crash: this actor, not the runtime
            crash = Crash.of(error, _job_name(job, args))
            for reply in _replies_in(args):
                refuse(reply, crash.error(self.name))
            if fallback is not None:
                await self._post(fallback(crash.error(self.name)))
            await self._post(_WorkerCrashed(crash))
        except BaseException:
            for reply in _replies_in(args):
                reply.close()
            raise
        finally:
            self._workers.pop(scope, None)

    async def _post(self, message: object) -> None:
        await post(self.inbox, message)

    def close(self) -> None:
        """End `run`: the loop stops and every worker is cancelled."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def emit(self, event: Event) -> None:
        """Send ``event`` without ever waiting for it. The supervisor's channel has no
        bound (`event_relay.EVENT_BUFFER`), so there it is dropped only when the supervisor
        is gone; a bounded channel given to `create` (the front door's) drops it when full."""
        try:
            self._events.send_nowait(event)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # gone, or a bounded outlet is full: the actor never waits for it

    def report(self, status: InstanceStatus) -> None:
        """Publish ``status`` to the slot (always: uptime, probes and notes move on), and
        emit `StateChanged` when its state, detail or serving differs from the last one."""
        self.slot.publish(status)
        old = self._reported
        if (old.state, old.detail, old.serving) != (status.state, status.detail, status.serving):
            self._reported = status
            now = trio.current_time()
            new, detail, serving = status.state, status.detail, status.serving
            self.emit(StateChanged(self.name, old.state, new, detail, now, serving))

    def drain(self, error: InferactorsError | None = None) -> None:
        """Answer every command still queued with ``error`` (default `UnknownInstance`),
        then close the inbox, so nobody waits forever and later commands fail at once."""
        gone = error or UnknownInstance(f"{self.name} is no longer loaded")
        while True:
            try:
                message = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            _refuse_reply(message, gone)
        self._receive.close()


async def post(inbox: trio.MemorySendChannel[object], message: object) -> None:
    """Send ``message`` to an actor's ``inbox`` (a worker's result); nothing when the actor
    is gone: its teardown answered everyone."""
    try:
        await inbox.send(message)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


def _refuse_reply(message: object, error: InferactorsError) -> None:
    reply = getattr(message, "reply", None)
    if isinstance(reply, trio.MemorySendChannel):
        refuse(reply, error)


def _replies_in(args: tuple[object, ...]) -> tuple[ReplyTo[Any], ...]:
    return tuple(arg for arg in args if isinstance(arg, trio.MemorySendChannel))


def _job_name(job: Callable[..., Awaitable[Any]], args: tuple[object, ...]) -> str:
    if job is scoped and len(args) > 1 and callable(args[1]):
        job = args[1]  # scoped(scope, job, ...): the job is what ran
    return f"worker {getattr(job, '__name__', type(job).__name__)}"


def _first_leaf(error: BaseException) -> tuple[BaseException, int]:
    others = 0
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        others += len(error.exceptions) - 1
        error = error.exceptions[0]
    return error, others


def _text_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a __str__ that raises must not crash the crash report
        return "<unprintable>"


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
