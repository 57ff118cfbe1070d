"""The Fleet: every instance of a run file, in one runtime per (flavor, mode), behind one
object that ``inferactors run``, its control API and its systemd notifier share.

`open_fleet` (``fleet_open.py``) opens the runtimes, loads and starts every instance
concurrently (one slow server delays no other) and yields the `Fleet`; leaving it says
`Lifecycle.STOPPING` and stops every managed server (`Fleet.close`). What the fleet shows
(`Fleet.views`, `Fleet.ready`, `Fleet.settled`) is cached, refreshed by each instance's own
task on its events, so reading it never waits on an actor or does I/O. Its events and its
instances' output lines (kept, followed, routed to their members): ``fleet_streams.py``.
Reload: ``_service/reload.py``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import trio

from .._config.front_door import FrontDoorConfig
from .._config.runfile import Endpoint, RunConfig
from .._edges.bundle import Edges, ProbeTimed
from .._edges.log_ring import LogLine
from .._edges.loop_lag import loop_lag
from .._edges.memory_gauge import MemoryGauge
from .._errors import InvalidState, UnknownInstance
from .._events import Event
from .._policy import fleet_exit, service_status
from .._policy.reload_plan import Placement
from .._stop_reasons import StopReason
from .drain import Drainer, NoDrain
from .fleet_door import DoorDrainer, FleetDoor, open_fleet_door
from .fleet_figures import read_figures
from .fleet_front_door import serve_fleet_front_door
from .fleet_streams import FleetEvents, follow_output, output_tail
from .fleet_words import orphan_words, summary
from .hosts import RuntimeHost, Say, open_host
from .members import Member, keep
from .metrics import FleetMetrics
from .reload import reload_fleet
from .ui_history import UiHistory
from .views import InstanceView, Lifecycle, LifecycleNote, ReadyView, ReloadResult

__all__ = ["Fleet", "InstanceView", "LifecycleNote", "ReloadResult", "orphan_words"]


@attrs.define(eq=False)
class Fleet:
    """The supervised instances of one run file (module docstring); made by `open_fleet`."""

    run_file: Path
    state_dir: Path
    say: Say
    metrics: FleetMetrics
    edges: Edges
    stop_grace_s: float
    _nursery: trio.Nursery
    reserved: tuple[Endpoint, ...] = ()
    """Addresses the supervisor listens on itself (the control API's port): a reload that
    puts an instance there is refused as an invalid run file."""
    drainer: Drainer = attrs.Factory(NoDrain)
    """Drains a changed or removed instance's requests before a reload stops it (the front
    door sets its own; ``drain.py``)."""
    settled: trio.Event = attrs.Factory(trio.Event)
    """Set once every instance reached its first settled state (Running, Degraded,
    Exited, given up, refused)."""
    given_up: trio.Event = attrs.Factory(trio.Event)
    """Set once the supervisor should stop by itself: a required instance is down for good,
    or every instance is (`_policy.fleet_exit.verdict`); ``exit_status`` says how. Decided
    from the members' views, which show a state only once its `StateChanged` was published
    (``members._refresh``): every event that explains it is in the stream before it is set."""
    exit_status: int | None = None
    """The status ``inferactors run`` exits with once ``given_up`` is set (1, or 78 when a
    restart of the supervisor cannot help)."""
    members: dict[str, Member] = attrs.Factory(dict)
    hosts: list[RuntimeHost] = attrs.Factory(list)
    door: FleetDoor | None = None
    """The scheduler of on-demand instances and the front door (``fleet_door.py``)."""
    front_door: FrontDoorConfig | None = None
    """The ``[front_door]`` it serves (``fleet_front_door.py``): a reload may add one,
    never change it."""
    gauge: MemoryGauge | None = None
    """The scheduler's memory gauge (psutil's when None)."""
    reload_lock: trio.Lock = attrs.Factory(trio.Lock)
    closing: bool = False
    closed: trio.Event = attrs.Factory(trio.Event)
    """Set once `close` is over: the control API's follow streams end with it."""
    history: UiHistory = attrs.Factory(UiHistory)
    """What the web page plots and lists of each instance (bounded, in memory)."""
    _events: FleetEvents = attrs.field(init=False)
    """Its events, and every instance id it had (``fleet_streams.py``)."""
    _hooks: list[Callable[[LifecycleNote], None]] = attrs.Factory(list)
    changes: int = 0
    """How many times a member's view changed (`changed`): it grows with each; the web
    page's table is refreshed once per change (``ui_table.py``)."""
    _views_changed: trio.Event = attrs.Factory(trio.Event)

    def __attrs_post_init__(self) -> None:
        self._events = FleetEvents(self.metrics, self.history)

    # Reading: cached, no I/O.

    def views(self) -> tuple[InstanceView, ...]:
        """Every instance's view, in run-file order (the scheduler's residency read once)."""
        door = self.door.scheduler if self.door is not None else None
        residency = {} if door is None else door.residency()
        return tuple(member.view(residency.get(name)) for name, member in self.members.items())

    def view(self, name: str) -> InstanceView:
        """The view of the instance named ``name``. Raises `UnknownInstance`."""
        member = self.member(name)
        door = self.door.scheduler if self.door is not None else None
        return member.view(None if door is None else door.residency_of(name))

    def member(self, name: str) -> Member:
        """The member named ``name``. Raises `UnknownInstance`."""
        try:
            return self.members[name]
        except KeyError:
            raise UnknownInstance(f"no instance named {name!r} in {self.run_file}") from None

    def readiness(self) -> tuple[ReadyView, ...]:
        """Every instance's readiness for ``/readyz``, in run-file order (no I/O)."""
        return tuple(member.ready_view() for member in self.members.values())

    def on_probe(self, timed: ProbeTimed) -> None:
        """One probe of an instance (`Edges.on_probe`): counted in the metrics, and one
        readiness observation of its member."""
        self.metrics.on_probe(timed)
        member = self._events.member_of(timed.instance_id)
        if member is not None:
            self.history.on_probe(member.name, timed.latency_s)
        if member is not None and member.refused is None:
            member.readiness.observe(member.status)

    async def until_changed(self) -> None:
        """Wait until a member's cached view changes (each is read again on every event
        of its instance, so this follows the events with the views already fresh)."""
        await self._views_changed.wait()

    def name_of(self, instance_id: str) -> str | None:
        """The name (role) of the instance with ``instance_id``, now or before a reload;
        None for an id the fleet never had."""
        return self._events.name_of(instance_id)

    def adopted(self, instance_id: str) -> bool:
        """Whether the instance with ``instance_id`` is (or was) an adopted server."""
        return self._events.adopted(instance_id)

    def recent_events(self, n: int) -> tuple[Event, ...]:
        """The last ``n`` events (at most `event_fan.EVENT_RING`), oldest first."""
        return self._events.recent(n)

    def follow_events(self) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[Event]]:
        """Every event from now on, until the block is left (or the fleet closes: the
        channel ends); a follower that falls behind loses the newest (`EventFan.follow`)."""
        return self._events.follow()

    def log_tail(self, name: str, lines: int) -> tuple[LogLine, ...]:
        """The instance's last ``lines`` output lines (across restarts), oldest first;
        none for an instance refused at load.

        Raises:
            UnknownInstance: no such instance.
            Unsupported: an adopted server: its output is not ours to read.
        """
        return output_tail(self.member(name), lines)

    @contextlib.contextmanager
    def follow_logs(self, name: str) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
        """The instance's output lines from now on, until the block is left.

        Raises:
            UnknownInstance: no such instance, or it has no output (refused).
            Unsupported: an adopted server (`log_tail`).
        """
        with follow_output(self.member(name)) as lines:
            yield lines

    def metrics_text(self) -> bytes:
        """The Prometheus text of the fleet's metrics."""
        return self.metrics.render(self.views())

    async def refresh_metrics(self) -> None:
        """Read what the servers report and cost (``metrics_engines.py``), all at once,
        within `fleet_figures.ENGINE_SCRAPE_S` (a late one is left out, a failed one said as
        failed), and the deadlines our own lateness left without a verdict so far
        (`FleetMetrics.lost_verdicts`: it moves while an overload lasts)."""
        self.metrics.lost_verdicts(loop_lag().watch.no_verdicts_total)
        self.metrics.engines.update(*await read_figures(self.members.values()))

    async def alive(self, deadline_s: float) -> bool:
        """Whether every runtime's supervisor actor answered within ``deadline_s`` float
        seconds (one deadline for all)."""
        with trio.move_on_after(deadline_s):
            for host in list(self.hosts):
                await host.runtime.instances()
            return True
        return False

    # Commands.

    async def start(self, name: str, wait_s: float = 0.0) -> InstanceView:
        """An operator's start: the restart budget is refilled, then the server started;
        then, for up to ``wait_s`` float seconds, `settle`. Returns the view then.

        Raises:
            UnknownInstance: no such instance.
            InvalidState: already running, held down (reload it), or refused at load.
            BackendError: as `InferRuntime.start`.
        """
        member = self._loaded(name)
        assert member.handle is not None
        await member.runtime.reset_restarts(member.handle)
        if self.door is None or not await self.door.start(member):  # on demand: admitted
            await member.runtime.start(member.handle)
        await self._fresh(member)
        return await self.settle(member, wait_s)

    async def stop(self, name: str) -> InstanceView:
        """An operator's stop (reason ``requested``: not a crash, never restarted); an
        instance with no process (stopped, given up, in backoff) is left as it is, and a
        pending restart is cancelled. The view shows ``stopping`` meanwhile.

        Raises:
            UnknownInstance: no such instance.
            InvalidState: refused at load.
            Unsupported: an adopted server, which inferactors never signals.
        """
        member = self._loaded(name)
        assert member.handle is not None
        member.stopping += 1
        self.changed(member)
        try:
            if self.door is None or not await self.door.stop(member, StopReason.REQUESTED):
                await member.runtime.stop(member.handle, self.stop_grace_s)
        except InvalidState:
            pass  # nothing runs: it is already stopped (its view says how it stands)
        finally:
            member.stopping -= 1
        return await self._fresh(member)

    async def restart(self, name: str, wait_s: float = 0.0) -> InstanceView:
        """An operator's restart: the restart budget is refilled (as for a start), the
        server stopped if it runs, then started (as `InferRuntime.restart`); then, for up
        to ``wait_s`` float seconds, `settle`."""
        member = self._loaded(name)
        assert member.handle is not None
        await member.runtime.reset_restarts(member.handle)
        await member.runtime.restart(member.handle, self.stop_grace_s)
        await self._fresh(member)
        return await self.settle(member, wait_s)

    async def settle(self, member: Member, wait_s: float) -> InstanceView:
        """``member``'s view once it is running or its start settled otherwise (degraded,
        given up, held down, stopped, gone: ``_policy/service_status.py``), or when ``wait_s``
        float seconds have passed (still starting, or in backoff: a pending restart may yet
        bring it up). Waits on its updates, without polling."""
        with trio.move_on_after(wait_s):
            while not service_status.settled(member.view().display_state):
                await member.until_updated()
        return self.view(member.name)

    async def reload(self) -> ReloadResult:
        """Re-read the run file and apply what changed (``_service/reload.py``).

        Raises:
            InvalidConfig: the run file is invalid, or a runtime it needs cannot be
                opened; nothing changed.
        """
        return await reload_fleet(self)

    def on_lifecycle(self, hook: Callable[[LifecycleNote], None]) -> None:
        """Call ``hook`` (synchronously; it must not block) with every `LifecycleNote`:
        SETTLED once, RELOADING and RELOADED around each reload, STOPPING at the end."""
        self._hooks.append(hook)

    # Inside the fleet.

    def note(self, kind: Lifecycle, detail: str, failed: bool = False) -> None:
        """Pass a milestone to every lifecycle hook."""
        note = LifecycleNote(kind, detail, trio.current_time(), failed)
        for hook in list(self._hooks):
            hook(note)

    def index(self, member: Member) -> None:
        """Route the events of ``member``'s instance id to it (`Keeper`)."""
        if member.handle is not None:
            self._events.index(member.handle.instance_id, member)
            self.metrics.track([member.view()])

    def forget(self, member: Member) -> None:
        """Stop routing events to ``member`` (it was unloaded)."""
        self._events.forget(member)

    def changed(self, member: Member) -> None:
        """A member's view changed: settle, decide whether anything is left, and wake
        `until_changed` (`Keeper`)."""
        self.changes += 1
        self._views_changed.set()
        self._views_changed = trio.Event()
        places = [m.place() for m in self.members.values()]
        if not self.settled.is_set() and fleet_exit.settled(p.standing for p in places):
            self.settled.set()
            self.note(Lifecycle.SETTLED, summary(self.views()))
        if self.settled.is_set() and not self.given_up.is_set():
            self.exit_status = fleet_exit.verdict(places)
            if self.exit_status is not None:
                self.given_up.set()

    def on_event(self, event: Event) -> None:
        """One event of any runtime: kept, counted, passed on, and its member marked. The
        supervisor's own overload is one event loop's, which every runtime of the fleet
        reports: a report the same as the last but for its time is passed on once
        (`FleetEvents.on_event`)."""
        self._events.on_event(event)

    def admit(self, name: str, placement: Placement, host: RuntimeHost) -> Member:
        """Add a member and start its task (load, start, keep)."""
        member = Member(name, placement, host)
        self.members[name] = member
        self._nursery.start_soon(keep, member, self)
        return member

    def open_door(self, config: RunConfig) -> bool:
        """Open the scheduler when ``config`` wants one and none runs yet (at the start, or
        a reload that adds the first on-demand instance, ``[front_door]`` or
        ``[residency]``); True when it was opened now. It opens over the members once every
        first load is over (`FleetDoor.opened`)."""
        if self.door is not None:
            return False
        self.door = open_fleet_door(self._nursery, self, config, self.gauge, self.metrics.door)
        if self.door is None:
            return False
        self.drainer = DoorDrainer(self.door, self)  # a reload drains through it first
        return True

    async def serve_front_door(self, config: FrontDoorConfig, listener: socket.socket) -> str:
        """Serve ``config`` on ``listener`` (bound by `bind_front_door`; taken over) over
        the scheduler until the fleet is closed; its address is reserved from then on (no
        instance may take it) and said. Returns its URL.

        Raises:
            InvalidConfig: as `serve_front_door`.
        """
        assert self.door is not None, "the run file's [front_door] opens the scheduler"
        served, endpoint = await serve_fleet_front_door(
            self._nursery, self.door, config, listener, self.metrics.registry, self.closed.wait
        )
        self.front_door = config
        self.reserved = (*self.reserved, endpoint)
        self.say(f"front door listening on {served.url}")
        return served.url

    def host_for(self, placement: Placement) -> RuntimeHost | None:
        """The open runtime ``placement`` runs in unchanged, if any."""
        return next((host for host in self.hosts if host.serves(placement)), None)

    async def open_host(self, placement: Placement) -> RuntimeHost:
        """Open a runtime for ``placement`` and say what it found of an earlier life."""
        host = await open_host(
            self._nursery, placement, self.edges, self.on_event, self.stop_grace_s
        )
        self.hosts.append(host)
        for orphan in host.runtime.reaped_orphans:
            self.say(orphan_words(orphan))
        return host

    def _loaded(self, name: str) -> Member:
        member = self.member(name)
        if member.handle is None:
            raise InvalidState(
                f"{name} is not loaded ({member.refused or 'retrying'}); fix and reload"
            )
        return member

    async def _fresh(self, member: Member) -> InstanceView:
        assert member.handle is not None
        member.update(member.runtime.status(member.handle), self)
        return member.view()

    async def close(self) -> None:
        """STOPPING, then every managed server stopped and every runtime closed; then the
        followers' channels (events, output lines) end after what they hold, and `closed`
        is set (even when this is cancelled)."""
        self.closing = True
        try:
            self.note(Lifecycle.STOPPING, "stopping")
            if self.door is not None:  # drained and stopped first: reason shutdown
                await self.door.close()
            for member in self.members.values():
                member.scope.cancel()
            async with trio.open_nursery() as nursery:
                for host in self.hosts:
                    nursery.start_soon(host.close)
        finally:
            self._events.close()
            self.edges.logs.close()
            self.closed.set()
