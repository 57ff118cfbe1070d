"""The front door's one loop: `DoorLoop`, the only writer of the scheduler's state
(llama-swap's ``baseRouter.run`` on trio; the facade is ``front_door_scheduler.py``).

Every input (a request, a withdrawn wait, a returned grant, a worker's result, an
instance's event, a measurement, a deadline) is a message handled synchronously by
`DoorLoop.dispatch`, which applies the pure handlers of ``_policy/scheduler*.py`` and
carries their effects out (``front_door_effects.py``): grants and refusals answer the
callers' reply channels; starts and stops run as workers (``front_door_work.py``) that use
the runtime's public calls and post their results back. Nothing else writes the state, so
two starts of one model, or an eviction of a busy instance, cannot happen by a race.

Returns (a grant's end, a withdrawn wait) never block and never raise: they go into a
list the loop empties first thing, woken by a `Wake` when the inbox has room.

Let it crash: an exception nobody foresaw in the loop or in a worker refuses every waiting
request and stops any start that was under way (its worker was cancelled); the loop goes
on with the next message (``mailbox.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._edges.memory_gauge import MemoryGauge
from .._errors import InvalidState, Unsupported
from .._events import Event
from .._policy import scheduler, scheduler_stops
from .._policy.scheduler_effects import Step, StopInstance
from .._policy.scheduler_state import Phase, SchedulerState, Slot
from .._stop_reasons import StopReason
from .front_door_effects import carry_out
from .front_door_msgs import (
    Acquire,
    Begin,
    Close,
    DoorMember,
    DoorObserver,
    DoorSettings,
    EngineFigure,
    Measured,
    Observed,
    Rebind,
    StartCommand,
    StartDone,
    StopCommand,
    StopDone,
    Tick,
    Wake,
)
from .front_door_watch import apply_engine, apply_measured, apply_observed
from .front_door_work import Nudge, follow_engine, measure, watch_events
from .mailbox import Crash, Mailbox, ScopeGroup, scoped
from .messages import ReplyTo, answer, refuse

_RESULTS = (StartDone, StopDone, Observed, EngineFigure)
"""Workers' results about one instance, by role."""


@attrs.define(eq=False)
class DoorLoop:
    """The front door actor's state and loop (module docstring)."""

    box: Mailbox
    settings: DoorSettings
    members: dict[str, DoorMember]
    state: SchedulerState
    gauge: MemoryGauge
    on_event: Callable[[Event], None]
    observer: DoorObserver
    crashes: trio.MemoryReceiveChannel[Event]
    """The mailbox's own events (`InstanceCrashed` of the loop), passed to ``on_event``."""
    replies: dict[int, ReplyTo[Any]] = attrs.Factory(dict)
    arrived: dict[int, float] = attrs.Factory(dict)
    starts: dict[str, trio.CancelScope] = attrs.Factory(dict)
    stoppers: dict[str, list[ReplyTo[None]]] = attrs.Factory(dict)
    closers: list[ReplyTo[None]] = attrs.Factory(list)
    last_stop: dict[str, StopReason] = attrs.Factory(dict)
    cut: dict[int, str] = attrs.Factory(dict)
    """Requests in flight whose instance a stop cut (its drain ran out), with that stop
    in words (`Grant.cut_by`); each leaves when its grant is given back."""
    measured_pid: dict[str, int] = attrs.Factory(dict)
    _watchers: ScopeGroup = attrs.Factory(ScopeGroup)
    _returns: list[tuple[int, bool | None]] = attrs.Factory(list)
    _next_request: int = 1
    _deadline: float = math.inf
    _rearm: trio.Event = attrs.Factory(trio.Event)
    _measuring: Nudge = attrs.Factory(Nudge)
    """Measures at once when a server became resident (its figure is known from then)."""

    # From any task: never block, never raise.

    def new_request(self) -> int:
        """A fresh request id."""
        request = self._next_request
        self._next_request += 1
        return request

    def returned(self, request: int, served: bool) -> None:
        """The grant ``request`` is over (``served`` False: its caller never took it)."""
        self._returns.append((request, served))
        self._wake()

    def withdrawn(self, request: int) -> None:
        """The caller of ``request`` stopped waiting (its client left)."""
        self._returns.append((request, None))
        self._wake()

    def _wake(self) -> None:
        try:
            self.box.inbox.send_nowait(Wake())
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the loop empties the returns with whatever message comes next

    async def post(self, message: object) -> None:
        """Send ``message`` to the loop (workers' results)."""
        try:
            await self.box.inbox.send(message)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the front door is closing

    # The loop.

    def dispatch(self, message: object) -> None:
        """Handle one message (synchronously; the only writer of ``state``)."""
        now = trio.current_time()
        self._take_returns(now)
        if isinstance(message, _RESULTS) and self.state.find(message.name) is None:
            return  # a worker's result about an instance a reload removed
        watched = message.name if isinstance(message, StartDone | Observed) else None
        before = None if watched is None else self._phase(watched)
        match message:
            case Begin():
                self._begin(now)
            case Acquire():
                self.replies[message.request] = message.reply
                since = now if message.since is None else min(message.since, now)
                self.arrived[message.request] = since
                request, model = message.request, message.model
                self.step(scheduler.on_request(self.state, request, model, now, since))
            case StartCommand():
                self._on_start_command(message, now)
            case StopCommand():
                self._on_stop_command(message, now)
            case Close():
                self.closers.append(message.reply)
                self.step(scheduler_stops.on_shutdown(self.state, now))
            case Rebind():
                self._rebind(message, now)
            case StartDone():
                self.starts.pop(message.name, None)
                self.step(scheduler.on_start_done(self.state, message.name, now, message.failure))
            case StopDone():
                if self.state.slot(message.name).phase is Phase.STOPPING:
                    self.step(scheduler.on_stopped(self.state, message.name, now))
                self.answer_stoppers(message.name)
            case Observed():
                apply_observed(self, message, now)
            case Measured():
                apply_measured(self, message, now)
            case EngineFigure():
                apply_engine(self, message, now)
            case Tick():
                self.step(scheduler_stops.on_tick(self.state, now))
            case Wake():
                pass
        self._take_returns(now)
        self._answer_closers()
        self._rearm_ticker(isinstance(message, Tick))
        became = watched is not None and self._phase(watched) is Phase.RESIDENT
        if became and before is not Phase.RESIDENT:
            self._measuring.now()  # it became resident: measure it now

    def _phase(self, name: str) -> Phase | None:
        """The phase of the slot of role ``name``; None when there is none (removed)."""
        try:
            return self.state.slot(name).phase
        except KeyError:
            return None

    def step(self, step: Step) -> None:
        """Take the new state and carry out its effects, in order."""
        self.state, effects = step
        for effect in effects:
            carry_out(self, effect)

    def _on_start_command(self, message: StartCommand, now: float) -> None:
        slot = self.state.find(message.name)
        if slot is None or slot.name != message.name:
            if message.reply is not None:
                refuse(message.reply, InvalidState(f"no instance named {message.name!r}"))
            return
        if message.reply is not None:
            self.replies[message.request] = message.reply
        self.step(scheduler.on_start(self.state, message.request, message.name, now))

    def _on_stop_command(self, message: StopCommand, now: float) -> None:
        try:
            slot = self.state.slot(message.name)
        except KeyError:
            refuse(message.reply, InvalidState(f"no instance named {message.name!r}"))
            return
        if slot.rules.adopted:
            why = f"{message.name} is adopted: inferactors observes it and never stops it"
            refuse(message.reply, Unsupported(why))
            return
        if slot.phase is Phase.NOT_LOADED:
            refuse(message.reply, InvalidState(f"{message.name} is not running"))
            return
        self.stoppers.setdefault(message.name, []).append(message.reply)
        self.step(scheduler_stops.on_stop(self.state, message.name, message.reason, now))

    def answer_stoppers(self, name: str) -> None:
        """Answer the operators who asked ``name`` to stop, once it is down."""
        if self.state.slot(name).phase is Phase.NOT_LOADED:
            for reply in self.stoppers.pop(name, []):
                answer(reply, None)

    def _take_returns(self, now: float) -> None:
        while self._returns:
            returns, self._returns = self._returns, []
            for request, served in returns:
                if served is None:
                    self.replies.pop(request, None)
                    self.arrived.pop(request, None)
                    self.step(scheduler.on_cancel(self.state, request, now))
                else:
                    self.cut.pop(request, None)
                    self.step(scheduler.on_serve_done(self.state, request, now, served))

    def _answer_closers(self) -> None:
        if not self.closers or not self.state.closing:
            return
        if all(s.phase is Phase.NOT_LOADED or s.rules.adopted for s in self.state.slots):
            for reply in self.closers:
                answer(reply, None)
            self.closers = []

    def _rearm_ticker(self, ticked: bool) -> None:
        """Wake the ticker when the next deadline moved (or it waits after a tick)."""
        deadline = scheduler_stops.next_deadline(self.state)
        if deadline == self._deadline and not ticked:
            return
        self._deadline = deadline
        rearm, self._rearm = self._rearm, trio.Event()
        rearm.set()

    async def ticker(self) -> None:
        """Post a `Tick` whenever the scheduler's next deadline comes."""
        while True:
            rearm = self._rearm
            with trio.move_on_at(self._deadline):
                await rearm.wait()
                continue
            await self.post(Tick())
            await rearm.wait()

    def _begin(self, now: float) -> None:
        """Start the workers (the mailbox's nursery exists once the loop runs), then the
        preload list."""
        box = self.box
        box.finish(_forward_events, self.crashes, self.on_event)
        box.finish(self.ticker)
        interval = self.settings.measure_interval_s
        box.finish(measure, self.held_members, self.gauge, interval, self.post, self._measuring)
        self._watch()
        for name in self.settings.preload:
            self.step(scheduler.on_start(self.state, self.new_request(), name, now))

    def _watch(self) -> None:
        """Watch every member's events (one subscription per runtime) and its server's
        buffer lines, until a rebind replaces them."""
        self._watchers.cancel()
        scopes = self._watchers = ScopeGroup()
        by_runtime: dict[int, dict[str, DoorMember]] = {}
        for member in self.members.values():
            by_runtime.setdefault(id(member.runtime), {})[member.name] = member
        for group in by_runtime.values():
            runtime = next(iter(group.values())).runtime
            self.box.finish(scoped, scopes.new(), watch_events, runtime, group, self.post)
        for member in self.members.values():
            self.box.finish(scoped, scopes.new(), follow_engine, member, self.post)

    def _rebind(self, message: Rebind, now: float) -> None:
        """A reload's new members: a kept instance (same handle) keeps its slot; a new or
        reloaded one starts not loaded (the reload stopped the old one)."""
        slots = []
        for member in message.members:
            old = self.members.get(member.name)
            kept = old is not None and old.handle == member.handle
            slot = self.state.slot(member.name) if kept else Slot(member.rules, member.footprint)
            slots.append(attrs.evolve(slot, rules=member.rules))
        self.members = {member.name: member for member in message.members}
        self.settings = message.settings
        limits = message.settings.limits
        self.step(scheduler.on_rebind(self.state, tuple(slots), limits, now))
        self._watch()
        answer(message.reply, None)

    def crashed(self, crash: Crash) -> None:
        """Reset after an exception nobody foresaw: every waiting caller is refused,
        every start under way (its worker was cancelled) is stopped."""
        error = crash.error("the front door")
        for waiter in self.state.queue:
            reply = self.replies.pop(waiter.request, None)
            if reply is not None:
                refuse(reply, error)
        self.state = attrs.evolve(self.state, queue=())
        for name in list(self.starts):
            self.starts.pop(name).cancel()
            slot = self.state.slot(name)
            if slot.phase is Phase.STARTING:
                stopping = attrs.evolve(slot, phase=Phase.STOPPING, stop_reason=StopReason.ERROR)
                self.state = self.state.with_slot(stopping)
                why = "the front door crashed during its start"
                carry_out(self, StopInstance(name, StopReason.ERROR, why))

    def held_members(self) -> list[DoorMember]:
        """The members whose servers hold memory now."""
        return [self.members[slot.name] for slot in self.state.slots if slot.held]


async def _forward_events(
    events: trio.MemoryReceiveChannel[Event], on_event: Callable[[Event], None]
) -> None:
    async for event in events:
        on_event(event)
