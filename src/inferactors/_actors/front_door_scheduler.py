"""The front door's scheduler: `FrontDoorScheduler`, the `Scheduler` of
``front_door_seam`` that the HTTP side asks for each request, and `open_scheduler` that
runs it.

The facade holds no state of its own: each call sends a message to the one loop
(``front_door_loop.DoorLoop``), which owns the scheduler's state, and awaits its answer;
`FrontDoorScheduler.models` and `FrontDoorScheduler.residency` read the loop's state (no
message, no I/O). design/scheduler.md says how a request is admitted, queued, granted and
ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

import attrs
import trio

from .._edges.memory_gauge import MemoryGauge, PsutilGauge
from .._errors import BackendError, InvalidState, RefusalKind
from .._events import Event
from .._policy import scheduler_stops
from .._policy.residency import Bytes
from .._policy.scheduler_state import Phase, SchedulerState, Slot
from .._stop_reasons import StopReason
from .front_door_loop import DoorLoop
from .front_door_msgs import (
    Acquire,
    Begin,
    Close,
    DoorMember,
    DoorObserver,
    DoorSettings,
    Rebind,
    ResidencyView,
    StartCommand,
    StopCommand,
)
from .front_door_seam import Grant, ModelEntry, Residency, Upstream
from .mailbox import Mailbox
from .messages import Reply

CLOSE_MARGIN_S = 5.0
"""Time allowed beyond the drain and the stop grace for closing, float seconds."""

RESIDENCY = {
    Phase.NOT_LOADED: Residency.NOT_LOADED,
    Phase.STARTING: Residency.STARTING,
    Phase.RESIDENT: Residency.RESIDENT,
    Phase.DRAINING: Residency.STOPPING,
    Phase.STOPPING: Residency.STOPPING,
}
"""How each scheduler phase is reported to clients."""


@attrs.define(eq=False)
class _Grant:
    """A `Grant`: `done` gives it back once (later calls do nothing)."""

    request: int
    upstream: Upstream
    _loop: DoorLoop
    _done: bool = False

    def done(self) -> None:
        if not self._done:
            self._done = True
            self._loop.returned(self.request, served=True)

    def cut_by(self) -> str | None:
        return self._loop.cut.get(self.request)


@attrs.define(eq=False)
class FrontDoorScheduler:
    """The scheduler of one front door (module docstring); open with `open_scheduler`."""

    _loop: DoorLoop

    def models(self) -> tuple[ModelEntry, ...]:
        """Every model, in the run file's order (no I/O)."""
        members = self._loop.members
        return tuple(
            ModelEntry(
                name=slot.name,
                aliases=slot.rules.aliases,
                flavor=members[slot.name].upstream.flavor,
                residency=RESIDENCY[slot.phase],
                on_demand=slot.rules.on_demand,
            )
            for slot in self._loop.state.slots
        )

    async def acquire(self, model: str, *, since: float | None = None) -> Grant:
        """Wait (bounded by the run's ``max_wait_s``) until the instance serving ``model``
        (its role or an alias) may take one more request: started on demand, room made by
        evicting idle instances, or its turn behind requests ahead. Cancellation withdraws
        this request only; a grant that arrived meanwhile is given back unused.

        ``since`` (trio time): when the request arrived, if it already waited before this
        call (for the scheduler to open); its ``max_wait_s`` counts from then.

        Raises:
            FrontDoorRefused: unknown model (404), queue full (503), waited too long (503),
                concurrency limit (429), never fits (507, not retryable), memory not
                recovered (503), its start failed (503, or 502 when a retry cannot help;
                in the server's own words), stopping (503).
            BackendError: the front door is closed.
        """
        loop = self._loop
        request = loop.new_request()
        send, receive = trio.open_memory_channel[Reply[Upstream]](1)
        with receive:
            await _send(loop.box, Acquire(request, model, send, since))
            try:
                reply = await receive.receive()
            except trio.EndOfChannel:
                raise BackendError("the front door stopped before it answered") from None
            except BaseException:
                _withdraw(loop, request, receive)
                raise
        return _Grant(request, reply.unwrap(), loop)

    async def start(self, name: str) -> None:
        """Start the on-demand instance ``name`` through admission, as a request would (it
        may evict idle instances, wait, or be refused); return once it is resident.

        Raises:
            FrontDoorRefused: as `acquire` (never fits, waited too long, start failed).
            InvalidState: no instance has that role, or it is always on (its runtime
                starts it).
        """
        loop = self._loop
        slot = loop.state.find(name)
        if slot is None or slot.name != name:
            raise InvalidState(f"no instance named {name!r} behind the front door")
        if not slot.rules.on_demand:
            raise InvalidState(f"{name} is always on: its runtime starts it")
        send, receive = trio.open_memory_channel[Reply[None]](1)
        with receive:
            await _send(loop.box, StartCommand(loop.new_request(), name, send))
            (await receive.receive()).unwrap()

    async def stop(self, name: str, reason: StopReason = StopReason.REQUESTED) -> None:
        """Stop ``name`` through the one stop path: its waiters are refused, its requests
        in flight drain (at most ``drain_timeout_s``), then SIGTERM, grace, SIGKILL, with
        ``reason``; return once it is down.

        Raises:
            InvalidState: it is not running, or no instance has that role.
            Unsupported: an adopted server, which inferactors never stops.
        """
        send, receive = trio.open_memory_channel[Reply[None]](1)
        with receive:
            await _send(self._loop.box, StopCommand(name, reason, send))
            (await receive.receive()).unwrap()

    def budget(self) -> Bytes:
        """The bytes every resident instance may hold together, per resource (the run's
        ``[residency]`` budget, or the machine's memory less the reserve)."""
        return self._loop.state.limits.budget

    def residency(self) -> dict[str, ResidencyView]:
        """Each instance's residency figures, by role (no I/O)."""
        now = trio.current_time()
        return {slot.name: self._view(slot, now) for slot in self._loop.state.slots}

    def residency_of(self, name: str) -> ResidencyView | None:
        """The residency figures of the role ``name``, None when it is not scheduled (no
        I/O; the one slot's, not every slot's)."""
        try:
            slot = self._loop.state.slot(name)
        except KeyError:
            return None
        return self._view(slot, trio.current_time())

    def _view(self, slot: Slot, now: float) -> ResidencyView:
        loop, footprint = self._loop, slot.footprint
        last = loop.last_stop.get(slot.name)
        return ResidencyView(
            residency=RESIDENCY[slot.phase],
            on_demand=slot.rules.on_demand,
            declared_bytes=footprint.declared,
            estimated_bytes=footprint.estimated,
            measured_bytes=footprint.measured,
            kv_bytes=footprint.kv,
            in_flight=slot.in_flight,
            queued=loop.state.queued(slot.name),
            ttl_left_s=scheduler_stops.ttl_left(loop.state, slot.name, now),
            last_stop=None if last is None else last.value,
            notes=loop.members[slot.name].notes,
        )

    async def rebind(self, members: Sequence[DoorMember], settings: DoorSettings) -> None:
        """After a reload: the front door's instances are now ``members`` (a kept one, with
        the same handle, keeps its state; a reloaded one is not loaded) under ``settings``'
        limits. Waiters for a removed model are refused (404)."""
        send, receive = trio.open_memory_channel[Reply[None]](1)
        with receive:
            await _send(self._loop.box, Rebind(tuple(members), settings, send))
            (await receive.receive()).unwrap()

    async def close(self) -> None:
        """Refuse every waiter and later request, drain every instance (bounded) and stop
        it (reason ``shutdown``); return once all are down."""
        send, receive = trio.open_memory_channel[Reply[None]](1)
        with receive:
            try:
                await self._loop.box.inbox.send(Close(send))
                await receive.receive()
            except (trio.ClosedResourceError, trio.BrokenResourceError, trio.EndOfChannel):
                pass  # already closed


async def _send(box: Mailbox, message: object) -> None:
    try:
        await box.inbox.send(message)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        raise BackendError("the front door is closed") from None


def _withdraw(
    loop: DoorLoop, request: int, receive: trio.MemoryReceiveChannel[Reply[Upstream]]
) -> None:
    """The caller of ``request`` left: give back a grant that came meanwhile, else withdraw
    its wait (no checkpoint in between: nothing can arrive during this)."""
    try:
        reply = receive.receive_nowait()
    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
        loop.withdrawn(request)
        return
    if reply.error is None:
        loop.returned(request, served=False)


class _Nobody:
    def granted(self, name: str, waited_s: float) -> None:
        """Heard by nobody."""

    def refused(self, name: str | None, kind: RefusalKind) -> None:
        """Heard by nobody."""


@contextlib.asynccontextmanager
async def open_scheduler(
    members: Sequence[DoorMember],
    settings: DoorSettings,
    *,
    gauge: MemoryGauge | None = None,
    on_event: Callable[[Event], None] | None = None,
    observer: DoorObserver | None = None,
) -> AsyncIterator[FrontDoorScheduler]:
    """Run the scheduler of a front door over ``members`` for the block.

    The members are loaded instances (an on-demand one not started). While the block
    runs, the preload list is started, every member's events are watched and memory is
    measured every ``settings.measure_interval_s`` (with ``gauge``: psutil by default).
    ``on_event`` hears the front door's events (`OnDemandStart`, `ResidencyStop`,
    `QueuedRequestRefused`, `FootprintDrift`) and its loop's crashes; ``observer`` each
    request's outcome. Leaving the block closes the door (`FrontDoorScheduler.close`: every
    instance drained and stopped, bounded by the drain timeout, the stop grace and
    `CLOSE_MARGIN_S`).
    """
    crashes_send, crashes = trio.open_memory_channel[Event](64)
    slots = tuple(Slot(m.rules, m.footprint) for m in members)
    loop = DoorLoop(
        box=Mailbox.create("front-door", crashes_send),
        settings=settings,
        members={m.name: m for m in members},
        state=SchedulerState.of(settings.limits, slots),
        gauge=gauge or PsutilGauge(),
        on_event=on_event or (lambda event: None),
        observer=observer or _Nobody(),
        crashes=crashes,
    )
    door = FrontDoorScheduler(loop)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop.box.run, loop.dispatch, loop.crashed)
        await loop.post(Begin())
        try:
            yield door
        finally:
            bound = settings.limits.drain_timeout_s + settings.stop_grace_s + CLOSE_MARGIN_S
            with trio.move_on_after(bound, shield=True):
                await door.close()
            nursery.cancel_scope.cancel()
