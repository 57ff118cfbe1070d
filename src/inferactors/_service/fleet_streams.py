"""What a fleet tells of its instances over time: their events and their output lines, each
as the last ones and a follow of what comes next (the control API's ``/events`` and
``/logs``, the web page, ``inferactors run``'s printer).

`FleetEvents` takes the events of every runtime of a `fleet.Fleet`: each is kept for
`FleetEvents.recent` and its followers (``event_fan.py``), counted in the metrics, added to
the web page's history and told to the member of its instance id; a supervisor's overload
report that every runtime repeats is passed on once. It knows every instance id the fleet
had, by name, after an unload too (its events still name it). `output_tail` and
`follow_output` read a managed instance's output lines through its runtime; an adopted
server's output is not ours to read. Synchronous and in memory: no I/O, never waits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import attrs
import trio

from .._edges.log_ring import LogLine
from .._errors import UnknownInstance, Unsupported
from .._events import Event, SupervisorCaughtUp, SupervisorOverloaded, instance_of
from .event_fan import EventFan
from .members import Member
from .metrics import FleetMetrics
from .ui_history import UiHistory


@attrs.define(eq=False)
class FleetEvents:
    """The events of a fleet's runtimes, passed on (module docstring), and the instance
    ids they name.

    Attributes:
        metrics: count each event.
        history: what the web page keeps of each instance.
    """

    metrics: FleetMetrics
    history: UiHistory
    _fan: EventFan = attrs.Factory(EventFan)
    _by_iid: dict[str, Member] = attrs.Factory(dict)
    _names: dict[str, tuple[str, bool]] = attrs.Factory(dict)
    """Every instance id the fleet had, to its name and whether it was adopted (kept after
    an unload: its events still name it)."""
    _last_overload: SupervisorOverloaded | SupervisorCaughtUp | None = None

    def index(self, iid: str, member: Member) -> None:
        """Route the events of instance id ``iid`` to ``member`` and know it by its name."""
        self._by_iid[iid] = member
        adopted = member.placement.entry.mode.value == "adopted"
        self._names[iid] = (member.name, adopted)

    def forget(self, member: Member) -> None:
        """Stop routing events to ``member`` (it was unloaded); its name is kept."""
        if member.handle is not None and self._by_iid.get(member.handle.instance_id) is member:
            del self._by_iid[member.handle.instance_id]

    def member_of(self, instance_id: str) -> Member | None:
        """The member the events of ``instance_id`` go to, if any now."""
        return self._by_iid.get(instance_id)

    def name_of(self, instance_id: str) -> str | None:
        """The name (role) of ``instance_id``, now or before a reload; None if never had."""
        known = self._names.get(instance_id)
        return None if known is None else known[0]

    def adopted(self, instance_id: str) -> bool:
        """Whether ``instance_id`` is (or was) an adopted server."""
        known = self._names.get(instance_id)
        return known is not None and known[1]

    def on_event(self, event: Event) -> None:
        """One event of any runtime: kept, counted, passed on, and told to its member. An
        overload report the same as the last but for its time is passed on once."""
        if isinstance(event, SupervisorOverloaded | SupervisorCaughtUp):
            last, self._last_overload = self._last_overload, event
            if last is not None and attrs.evolve(event, at=last.at) == last:
                return
        self._fan.publish(event)
        self.metrics.observe(event)
        iid = instance_of(event)
        member = None if iid is None else self._by_iid.get(iid)
        if member is not None:
            self.history.on_event(member.name, event)
            member.hear(event)

    def recent(self, n: int) -> tuple[Event, ...]:
        """The last ``n`` events (at most `event_fan.EVENT_RING`), oldest first."""
        return self._fan.recent(n)

    def follow(self) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[Event]]:
        """Every event from now on, until the block is left or `close` (`EventFan.follow`)."""
        return self._fan.follow()

    def close(self) -> None:
        """End every follower's channel after what it holds."""
        self._fan.close()


def output_tail(member: Member, lines: int) -> tuple[LogLine, ...]:
    """``member``'s last ``lines`` output lines (across restarts), oldest first; none for
    an instance refused at load.

    Raises:
        Unsupported: an adopted server.
    """
    _ours(member)
    if member.handle is None:
        return ()
    try:
        return member.runtime.logs(member.handle, lines)
    except UnknownInstance:
        return ()


@contextlib.contextmanager
def follow_output(member: Member) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
    """``member``'s output lines from now on, until the block is left.

    Raises:
        UnknownInstance: it has no output (refused at load).
        Unsupported: an adopted server.
    """
    _ours(member)
    if member.handle is None:
        raise UnknownInstance(f"{member.name} is not loaded: {member.refused or 'no output'}")
    with member.runtime.follow_logs(member.handle) as lines:
        yield lines


def _ours(member: Member) -> None:
    """Nothing when ``member``'s output is ours (a managed server).

    Raises:
        Unsupported: an adopted server.
    """
    if member.placement.entry.mode.value == "adopted":
        raise Unsupported(
            f"{member.name} is adopted: inferactors did not start it and never reads its "
            "output; see where its own process logs"
        )
