"""The front door scheduler's state (pure values; no I/O, no clock).

One `SchedulerState` is the whole truth of the front door: every instance's `Slot` (its
rules, footprint, phase, requests in flight, last use), the FIFO queue of `Waiter`s, the
requests granted and not yet done, and the memory other programs hold. It is frozen:
``_policy/scheduler.py``'s handlers return a new state and the effects
(``scheduler_effects.py``) the caller (the front door actor,
``_actors/front_door_scheduler.py``) carries out. `StartFailure` is what the caller reports
of a start that failed. Times are the caller's clock in float seconds; sizes are bytes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator

import attrs

from .._errors import RefusalKind
from .._stop_reasons import StopReason
from .eviction import Hold, Holder, Pin, Target
from .model_routes import route
from .residency import Bytes, Footprint


class Phase(enum.Enum):
    """Where one instance stands for the scheduler."""

    NOT_LOADED = "not-loaded"
    """Not running: an on-demand instance is started by the first request for it."""
    STARTING = "starting"
    """A start is under way; requests for it join that start."""
    RESIDENT = "resident"
    """Running (deep health passed): requests are granted."""
    DRAINING = "draining"
    """Stopping once its requests in flight end (or its drain deadline passes); no new
    request is granted."""
    STOPPING = "stopping"
    """Its server is being stopped."""


OPERATOR_STOPPED = "stopped by an operator"
"""Why an on-demand instance an operator stopped is not running (`Slot.down_words`)."""


@attrs.frozen
class SlotRules:
    """What the run file says of one instance (`_config.residency.InstanceResidency` and
    the groups it is in), resolved.

    Attributes:
        name: its role.
        aliases: other names that route to it (unique across the front door).
        on_demand: started by requests, stopped when idle; else always on.
        idle_ttl_s: idle seconds before an on-demand instance is stopped (inf: never).
        concurrency_limit: requests in flight and waiting for it at once (None: no limit).
        groups: every group it is in.
        persistent_groups: the persistent groups it is in.
        swap_group: its swap group, if any.
        excludes: roles that must not be resident beside it.
        adopted: an adopted server: never started or stopped by us.
    """

    name: str
    aliases: tuple[str, ...] = ()
    on_demand: bool = False
    idle_ttl_s: float = math.inf
    concurrency_limit: int | None = None
    groups: frozenset[str] = frozenset()
    persistent_groups: frozenset[str] = frozenset()
    swap_group: str | None = None
    excludes: frozenset[str] = frozenset()
    adopted: bool = False


@attrs.frozen
class Slot:
    """One instance as the scheduler sees it.

    Attributes:
        rules: its settings.
        footprint: its three figures (measured ones survive a stop: the next admission
            uses them).
        phase: where it stands.
        in_flight: requests granted and not yet done.
        last_used: when its last request ended, or it became resident (TTL and LRU).
        gated: its next start follows an eviction, so it first waits for the machine's
            free memory to cover it.
        stop_reason: why it is draining or stopping.
        drain_until: when a drain stops waiting for its requests in flight.
        down: why an always-on instance will not come back without an operator, else
            None.
        operator_stopped: an operator stopped this on-demand instance: requests for it
            are refused at once until an operator's start (`down_words`).
        joined_before: the first waiter ticket that came after it became resident: waiters
            with a lower ticket joined its start (or waited for it) and are granted even
            when a request ahead reserved it for eviction.
    """

    rules: SlotRules
    footprint: Footprint = Footprint()  # noqa: RUF009  (frozen value)
    phase: Phase = Phase.NOT_LOADED
    in_flight: int = 0
    last_used: float = 0.0
    gated: bool = False
    stop_reason: StopReason | None = None
    drain_until: float | None = None
    down: str | None = None
    operator_stopped: bool = False
    joined_before: int = 0

    @property
    def name(self) -> str:
        """Its role."""
        return self.rules.name

    def down_words(self) -> str | None:
        """Why it will not run again without an operator, in words, or None."""
        return OPERATOR_STOPPED if self.operator_stopped else self.down

    @property
    def held(self) -> bool:
        """Whether it holds memory now (anything but not loaded)."""
        return self.phase is not Phase.NOT_LOADED

    def pin(self) -> Pin | None:
        """Why it is never evicted, if it is not."""
        if self.rules.adopted:
            return Pin.ADOPTED
        return None if self.rules.on_demand else Pin.ALWAYS_ON

    def target(self) -> Target:
        """It as the instance to admit."""
        rules = self.rules
        need = self.footprint.need()
        return Target(rules.name, need, rules.groups, rules.swap_group, rules.excludes)

    def holder(self, waited_for: bool) -> Holder:
        """It as a resident; ``waited_for``: a request waits for it."""
        rules = self.rules
        return Holder(
            name=rules.name,
            need=self.footprint.need(),
            hold=self.hold(waited_for),
            last_used=self.last_used,
            pin=self.pin(),
            groups=rules.groups,
            persistent_groups=rules.persistent_groups,
            swap_group=rules.swap_group,
            excludes=rules.excludes,
        )

    def hold(self, waited_for: bool) -> Hold:
        """What it is doing, as eviction sees it."""
        match self.phase:
            case Phase.STARTING:
                return Hold.STARTING if waited_for else Hold.ABANDONED
            case Phase.RESIDENT:
                return Hold.BUSY if self.in_flight else Hold.IDLE
            case _:
                return Hold.STOPPING


@attrs.frozen
class Waiter:
    """A request (or an operator's start) waiting in the queue.

    Attributes:
        request: the caller's id for it.
        name: the role of the instance it waits for.
        since: when it arrived.
        deadline: when it is refused if still waiting.
        ticket: its place in arrival order (`SchedulerState.tickets` when it came).
        start_only: an operator's or the preload list's start: answered with `Started`
            once the instance is resident, never granted, not counted in queue depths.
    """

    request: int
    name: str
    since: float
    deadline: float
    ticket: int = 0
    start_only: bool = False


@attrs.frozen
class Limits:
    """The bounds of every wait, and the budget (``_config.residency.ResidencySection``).

    Attributes:
        budget: bytes per resource every resident may hold together.
        max_queue: requests that may wait at once, all models together.
        max_queue_per_model: requests that may wait at once for one model.
        max_wait_s: the longest one request waits.
        drain_timeout_s: how long a stop waits for requests in flight.
        retry_after_s: the ``Retry-After`` of a full queue or a timed-out wait.
    """

    budget: Bytes
    max_queue: int = 64
    max_queue_per_model: int = 16
    max_wait_s: float = 120.0
    drain_timeout_s: float = 30.0
    retry_after_s: float = 1.0


@attrs.frozen
class SchedulerState:
    """The front door's whole state (module docstring); build with `SchedulerState.of`.

    Attributes:
        limits: bounds and budget.
        slots: every instance, in the run file's order.
        queue: waiting requests, oldest first.
        serving: ``(request, role)`` of every grant not yet done.
        foreign: other programs' memory inside the budget, bytes.
        closing: shutting down: every new request is refused.
        tickets: the ticket of the next waiter (arrival order).
    """

    limits: Limits
    slots: tuple[Slot, ...]
    queue: tuple[Waiter, ...] = ()
    serving: tuple[tuple[int, str], ...] = ()
    foreign: int = 0
    closing: bool = False
    tickets: int = 0

    @classmethod
    def of(cls, limits: Limits, slots: tuple[Slot, ...]) -> SchedulerState:
        """A fresh state: nothing queued, nothing in flight."""
        return cls(limits, slots)

    def slot(self, name: str) -> Slot:
        """The slot of the role ``name``. Raises `KeyError`."""
        for slot in self.slots:
            if slot.name == name:
                return slot
        raise KeyError(name)

    def find(self, model: str) -> Slot | None:
        """The slot a request for ``model`` goes to (`model_routes.route`: by role, else by
        alias, else by the name Ollama would read it as)."""
        index = route(model, [(slot.name, slot.rules.aliases) for slot in self.slots])
        return None if index is None else self.slots[index]

    def enqueue(
        self,
        request: int,
        name: str,
        now: float,
        start_only: bool = False,
        since: float | None = None,
    ) -> SchedulerState:
        """The state with a new waiter for the role ``name`` at the end of the queue; it
        waits at most ``max_wait_s`` from ``since`` (when its request arrived, if it waited
        before it came here; never later than ``now``)."""
        arrived = now if since is None else min(since, now)
        deadline = arrived + self.limits.max_wait_s
        waiter = Waiter(request, name, arrived, deadline, self.tickets, start_only)
        return attrs.evolve(self, queue=(*self.queue, waiter), tickets=self.tickets + 1)

    def resident(self, slot: Slot, now: float) -> SchedulerState:
        """The state with ``slot`` resident from ``now``: every waiter so far joined it."""
        became = attrs.evolve(
            slot,
            phase=Phase.RESIDENT,
            last_used=now,
            down=None,
            operator_stopped=False,
            gated=False,
            joined_before=self.tickets,
        )
        return self.with_slot(became)

    def with_slot(self, slot: Slot) -> SchedulerState:
        """The state with ``slot`` in place of the slot of its role."""
        slots = tuple(slot if s.name == slot.name else s for s in self.slots)
        return attrs.evolve(self, slots=slots)

    def waiting_for(self, name: str) -> Iterator[Waiter]:
        """The waiters of the role ``name``, oldest first."""
        return (waiter for waiter in self.queue if waiter.name == name)

    def queued(self, name: str | None = None) -> int:
        """Requests waiting (not operator starts): for the role ``name``, or all."""
        return sum(
            1
            for waiter in self.queue
            if not waiter.start_only and (name is None or waiter.name == name)
        )

    def holders(self) -> tuple[Holder, ...]:
        """Every slot that holds memory, as eviction sees it."""
        waited = {waiter.name for waiter in self.queue}
        return tuple(slot.holder(slot.name in waited) for slot in self.slots if slot.held)

    def held(self) -> Bytes:
        """What every slot holding memory holds, plus other programs' memory."""
        room = Bytes.of(self.foreign)
        for slot in self.slots:
            if slot.held:
                room = room + slot.footprint.need()
        return room


@attrs.frozen
class StartFailure:
    """Why a start failed: ``kind`` is `RefusalKind.START_FAILED` (the server's own words in
    ``message``) or `RefusalKind.MEMORY_NOT_RECOVERED`; ``retry_after_s`` when a retry may
    help (its supervisor restarts it, memory may come back), else None."""

    kind: RefusalKind
    message: str
    retry_after_s: float | None = None
