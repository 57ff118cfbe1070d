"""The fleet's front door scheduler (``_actors/front_door_scheduler.py``): opened by ``inferactors
run`` when the run file has on-demand instances or a ``[residency]`` table, once every
instance's first load is over; rebound after each reload; closed first when the fleet
closes (every instance drained, then stopped with reason ``shutdown``).

`FleetDoor` is what the fleet keeps: the scheduler once open (`FleetDoor.scheduler`), the
seam's `Scheduler` itself (`models`, `acquire`: the front door's HTTP side may be given
the `FleetDoor` before the scheduler opens), and the steps the fleet's operator commands
and reload take through it, so that every stop of an instance it schedules drains its
requests first (the one stop path).

Before the scheduler opens, the model lists still tell the truth: every instance of the
run file that is not refused, ``starting`` while its first load is under way (``resident``
once it serves, ``not-loaded`` for an on-demand one: nothing starts it before a request),
and a request waits for the opening within its ``max_wait_s``, which goes on counting in
the scheduler's queue (503 ``wait-timeout`` with ``Retry-After`` past it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs
import trio

from .._actors.front_door_members import Placed, door_members, door_settings
from .._actors.front_door_msgs import DoorObserver
from .._actors.front_door_names import find_model
from .._actors.front_door_scheduler import FrontDoorScheduler, open_scheduler
from .._actors.front_door_seam import Grant, ModelEntry, Residency
from .._config.residency import ResidencySection
from .._config.runfile import RunConfig
from .._edges.memory_gauge import MemoryGauge, PsutilGauge
from .._errors import FrontDoorRefused, InferactorsError, InvalidState, RefusalKind
from .._events import Event, QueuedRequestRefused
from .._policy.residency_rules import slot_rules
from .._status import InstanceState
from .._stop_reasons import StopReason
from .members import Member


class Keeper(Protocol):
    """What the door reads of the fleet: its members (a reload replaces the table), its
    stop grace, and where its events go."""

    members: dict[str, Member]
    stop_grace_s: float

    def on_event(self, event: Event) -> None: ...


def open_fleet_door(
    nursery: trio.Nursery,
    fleet: Keeper,
    config: RunConfig,
    gauge: MemoryGauge | None,
    observer: DoorObserver,
) -> FleetDoor | None:
    """Start ``fleet``'s scheduler in ``nursery`` when ``config`` wants one
    (`wants_scheduler`); None when it does not."""
    if not wants_scheduler(config):
        return None
    door = FleetDoor(config.residency, gauge or PsutilGauge(), fleet.stop_grace_s, fleet, observer)
    nursery.start_soon(door.serve)
    return door


def wants_scheduler(config: RunConfig) -> bool:
    """Whether ``config`` needs the scheduler: a ``[front_door]`` or ``[residency]`` table,
    or an instance on demand."""
    if config.front_door is not None or config.residency is not None:
        return True
    return any(instance.residency.on_demand for instance in config.instances)


@attrs.define(eq=False)
class FleetDoor:
    """The scheduler of a fleet (module docstring)."""

    section: ResidencySection | None
    gauge: MemoryGauge
    stop_grace_s: float
    fleet: Keeper
    observer: DoorObserver
    scheduler: FrontDoorScheduler | None = None
    """The open scheduler; None before every first load is over (or when not wanted)."""
    opened: trio.Event = attrs.Factory(trio.Event)
    """Set once the scheduler is open (or could not be opened)."""
    _closing: trio.Event = attrs.Factory(trio.Event)
    _closed: trio.Event = attrs.Factory(trio.Event)

    # The seam's Scheduler (front_door_seam), for the front door's HTTP side.

    def models(self) -> tuple[ModelEntry, ...]:
        """The scheduler's models; before it opens, the run file's (module docstring);
        none once it closed."""
        if self.scheduler is not None:
            return self.scheduler.models()
        if self.opened.is_set():
            return ()
        return models_before_open(self.fleet.members.values(), self.section)

    async def acquire(self, model: str) -> Grant:
        """`FrontDoorScheduler.acquire`, once the scheduler is open; a request that comes
        while the first loads are still under way waits for them, and its ``max_wait_s``
        counts from its arrival, across both waits.

        Raises:
            FrontDoorRefused: as `FrontDoorScheduler.acquire`; 503 ``wait-timeout`` (with
                ``Retry-After``) when the scheduler did not open within ``max_wait_s``;
                503 ``stopping`` when the scheduler is closed or could not open.
        """
        since = trio.current_time()
        section = self.section or ResidencySection()
        with trio.move_on_after(section.max_wait_s):
            await self.opened.wait()
        if not self.opened.is_set():
            raise self._not_open(model, section, trio.current_time() - since)
        if self.scheduler is None:
            raise FrontDoorRefused(
                "the scheduler is not running (closing, or it could not open)",
                kind=RefusalKind.STOPPING,
                status=503,
                model=model,
                retry_after_s=1.0,
            )
        return await self.scheduler.acquire(model, since=since)

    def _not_open(self, model: str, section: ResidencySection, waited_s: float) -> FrontDoorRefused:
        """The refusal of a request that waited ``waited_s`` for the first loads, heard
        as a queued request refused."""
        why = (
            f"waited {waited_s:.3g} s for the first loads of the run to end (its max_wait_s "
            f"is {section.max_wait_s:g} s)"
        )
        entry = find_model(self.models(), model)
        member = None if entry is None else self.fleet.members.get(entry.name)
        self.observer.refused(None if member is None else member.name, RefusalKind.WAIT_TIMEOUT)
        if member is not None and member.handle is not None:
            kind = RefusalKind.WAIT_TIMEOUT.value
            iid, now = member.handle.instance_id, trio.current_time()
            self.fleet.on_event(QueuedRequestRefused(iid, kind, why, waited_s, now))
        return FrontDoorRefused(
            why,
            kind=RefusalKind.WAIT_TIMEOUT,
            status=503,
            model=model,
            retry_after_s=section.retry_after_s,
        )

    def scheduled(self, name: str) -> bool:
        """Whether the instance ``name`` is in the open scheduler."""
        return self.scheduler is not None and any(
            entry.name == name for entry in self.scheduler.models()
        )

    async def serve(self) -> None:
        """Wait for every member's first load, open the scheduler over the loaded ones,
        and keep it open until `close`."""
        fleet, observer = self.fleet, self.observer
        try:
            for member in list(fleet.members.values()):
                await member.first_done.wait()
            chosen = await door_members(_placed(fleet.members.values()), self.section)
            settings = await door_settings(self.section, self.gauge, self.stop_grace_s)
            async with open_scheduler(
                chosen, settings, gauge=self.gauge, on_event=fleet.on_event, observer=observer
            ) as door:
                self.scheduler = door
                self.opened.set()
                await self._closing.wait()
        finally:
            self.scheduler = None
            self.opened.set()
            self._closed.set()

    async def close(self) -> None:
        """Close the scheduler: waiters refused, every instance drained and stopped
        (reason ``shutdown``, bounded)."""
        self._closing.set()
        if self.opened.is_set():
            await self._closed.wait()

    async def start(self, member: Member) -> bool:
        """An operator's start of an on-demand instance through admission; False when
        the scheduler does not schedule it (start it through its runtime)."""
        door = self.scheduler
        if door is None or not self.scheduled(member.name):
            return False
        if not member.placement.entry.residency.on_demand:
            return False
        await door.start(member.name)
        return True

    async def stop(self, member: Member, reason: StopReason) -> bool:
        """Stop through the one stop path (drain, then stop with ``reason``); False when
        the scheduler does not schedule it. A stop of an instance that is not running
        raises `InvalidState`, as the runtime's."""
        door = self.scheduler
        if door is None or not self.scheduled(member.name):
            return False
        await door.stop(member.name, reason)
        return True

    async def drain(self, member: Member, reason: StopReason) -> None:
        """Before a reload unloads ``member``: drain and stop it (not running: fine)."""
        try:
            await self.stop(member, reason)
        except InvalidState:
            pass  # not running: nothing to drain
        except InferactorsError:
            pass  # adopted, or the scheduler closed: the unload does the rest

    async def rebind(self, members: Sequence[Member], section: ResidencySection | None) -> None:
        """After a reload: the scheduler's instances are the loaded ``members`` now."""
        door = self.scheduler
        if door is None:
            return
        self.section = section
        chosen = await door_members(_placed(members), section)
        settings = await door_settings(section, self.gauge, self.stop_grace_s)
        await door.rebind(chosen, settings)


def models_before_open(
    members: Iterable[Member], section: ResidencySection | None
) -> tuple[ModelEntry, ...]:
    """What the model lists say before the scheduler opens (module docstring): every
    member not refused, with the aliases and on-demand rule the scheduler will give it."""
    listed = [member for member in members if member.refused is None]
    rules = slot_rules([member.placement.entry for member in listed], section)
    return tuple(
        ModelEntry(
            name=member.name,
            aliases=rules[member.name].aliases,
            flavor=member.placement.entry.spec.runtime,
            residency=_residency_before_open(member, rules[member.name].on_demand),
            on_demand=rules[member.name].on_demand,
        )
        for member in listed
    )


def _residency_before_open(member: Member, on_demand: bool) -> Residency:
    status = member.status
    if status.state is InstanceState.RUNNING or status.serving:
        return Residency.RESIDENT
    if on_demand or (member.first_done.is_set() and status.state is InstanceState.EXITED):
        return Residency.NOT_LOADED
    return Residency.STARTING


def _placed(members: Iterable[Member]) -> list[Placed]:
    return [
        (m.runtime, m.handle, m.placement.entry.residency)
        for m in members
        if m.handle is not None and m.refused is None
    ]


@attrs.frozen
class DoorDrainer:
    """A reload's `Drainer` (``drain.py``) when the fleet has a scheduler: an instance's
    requests in flight drain through it and it is stopped there, reason ``reload`` (the
    one stop path), within the reload's deadline."""

    door: FleetDoor
    fleet: Keeper
    """Whose members (the table a reload replaces is read at each drain)."""

    async def drain(self, name: str, deadline_s: float) -> None:
        """`FleetDoor.drain` of the member ``name``, for at most ``deadline_s`` float
        seconds; nothing for a name that is not a member."""
        member = self.fleet.members.get(name)
        if member is None:
            return
        with trio.move_on_after(deadline_s):
            await self.door.drain(member, StopReason.RELOAD)
