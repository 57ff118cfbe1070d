"""The Fleet: every instance of a run file, in one runtime per (flavor, mode), behind one
object that ``inferactors run``, its control API and its systemd notifier share.

`open_fleet` opens the runtimes, loads and starts every instance concurrently (one slow
server delays no other) and yields the `Fleet`; leaving it says `Lifecycle.STOPPING` and
stops every managed server. What the fleet shows (`Fleet.views`, `Fleet.ready`,
`Fleet.settled`) is cached, refreshed by each instance's own task on its events, so
reading it never waits on an actor or does I/O. Reload: ``_service/reload.py``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import attrs
import trio

from .._config.runfile import RunConfig
from .._config.state_dir import state_dir_of
from .._edges.bundle import Edges
from .._edges.log_ring import LogLine
from .._edges.orphan_record import ReapedOrphan
from .._errors import InvalidState, UnknownInstance
from .._events import Event, instance_of
from .._policy import fleet_exit
from .._policy.reload_plan import Placement, placements
from .._status import InstanceState
from .hosts import RuntimeHost, Say, open_host, say_nothing
from .members import Member, keep
from .metrics import FleetMetrics
from .reload import reload_fleet
from .views import InstanceView, Lifecycle, LifecycleNote, ReloadResult

__all__ = ["Fleet", "InstanceView", "LifecycleNote", "ReloadResult", "open_fleet"]

STOP_GRACE_S = 10.0
"""Grace between SIGTERM and SIGKILL for each managed server, float seconds."""
EVENT_RING = 1000
"""How many of the last events `Fleet.recent_events` keeps."""
FOLLOW_BUFFER = 256
"""Events a follower may fall behind before it loses the newest ones."""
CLOSE_MARGIN_S = 10.0
"""Time allowed beyond the stop grace for closing the whole fleet, float seconds."""


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
    settled: trio.Event = attrs.Factory(trio.Event)
    """Set once every instance reached its first settled state (Running, Degraded,
    Exited, given up, refused)."""
    nothing_left: trio.Event = attrs.Factory(trio.Event)
    """Set once nothing is left to supervise (every instance refused, given up or held
    down: `_policy.fleet_exit`); ``inferactors run`` then exits 1."""
    members: dict[str, Member] = attrs.Factory(dict)
    hosts: list[RuntimeHost] = attrs.Factory(list)
    reload_lock: trio.Lock = attrs.Factory(trio.Lock)
    closing: bool = False
    closed: trio.Event = attrs.Factory(trio.Event)
    """Set once `close` is over: the control API's follow streams end with it."""
    _by_iid: dict[str, Member] = attrs.Factory(dict)
    _events: deque[Event] = attrs.Factory(lambda: deque(maxlen=EVENT_RING))
    _followers: set[trio.MemorySendChannel[Event]] = attrs.Factory(set)
    _hooks: list[Callable[[LifecycleNote], None]] = attrs.Factory(list)
    _views_changed: trio.Event = attrs.Factory(trio.Event)

    # Reading: cached, no I/O.

    def views(self) -> tuple[InstanceView, ...]:
        """Every instance's view, in run-file order."""
        return tuple(member.view() for member in self.members.values())

    def view(self, name: str) -> InstanceView:
        """The view of the instance named ``name``. Raises `UnknownInstance`."""
        return self.member(name).view()

    def member(self, name: str) -> Member:
        """The member named ``name``. Raises `UnknownInstance`."""
        try:
            return self.members[name]
        except KeyError:
            raise UnknownInstance(f"no instance named {name!r} in {self.run_file}") from None

    def ready(self) -> dict[str, bool]:
        """Per instance, whether it is Running (every instance is required)."""
        return {name: m.status.state is InstanceState.RUNNING for name, m in self.members.items()}

    async def until_changed(self) -> None:
        """Wait until a member's cached view changes (each is read again on every event
        of its instance, so this follows the events with the views already fresh)."""
        await self._views_changed.wait()

    def recent_events(self, n: int) -> tuple[Event, ...]:
        """The last ``n`` events (at most `EVENT_RING`), oldest first."""
        return tuple(self._events)[-n:] if n > 0 else ()

    @contextlib.contextmanager
    def follow_events(self) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        """Every event from now on, until the block is left (or the fleet closes: the
        channel ends). A follower `FOLLOW_BUFFER` events behind loses the newest ones."""
        send, receive = trio.open_memory_channel[Event](FOLLOW_BUFFER)
        self._followers.add(send)
        try:
            with receive:
                yield receive
        finally:
            self._followers.discard(send)
            send.close()

    def log_tail(self, name: str, lines: int) -> tuple[LogLine, ...]:
        """The instance's last ``lines`` output lines (across restarts), oldest first;
        none for an adopted server or an instance refused at load."""
        member = self.member(name)
        if member.handle is None or member.placement.entry.mode.value != "managed":
            return ()
        try:
            return member.runtime.logs(member.handle, lines)
        except UnknownInstance:
            return ()

    @contextlib.contextmanager
    def follow_logs(self, name: str) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
        """The instance's output lines from now on, until the block is left.

        Raises:
            UnknownInstance: no such instance, or it has no output (adopted, refused).
        """
        member = self.member(name)
        if member.handle is None:
            raise UnknownInstance(f"{name} is not loaded: {member.refused or 'no output'}")
        with member.runtime.follow_logs(member.handle) as lines:
            yield lines

    def metrics_text(self) -> bytes:
        """The Prometheus text of the fleet's metrics."""
        return self.metrics.render(self.views())

    async def alive(self, deadline_s: float) -> bool:
        """Whether every runtime's supervisor actor answered within ``deadline_s`` float
        seconds (one deadline for all)."""
        with trio.move_on_after(deadline_s):
            for host in list(self.hosts):
                await host.runtime.instances()
            return True
        return False

    # Commands.

    async def start(self, name: str) -> InstanceView:
        """An operator's start: the restart budget is refilled, then the server started.

        Raises:
            UnknownInstance: no such instance.
            InvalidState: already running, held down (reload it), or refused at load.
            BackendError: as `InferRuntime.start`.
        """
        member = self._loaded(name)
        assert member.handle is not None
        await member.runtime.reset_restarts(member.handle)
        await member.runtime.start(member.handle)
        return await self._fresh(member)

    async def stop(self, name: str) -> InstanceView:
        """An operator's stop (reason ``requested``: not a crash, never restarted).

        Raises:
            UnknownInstance: no such instance.
            InvalidState: not running, or refused at load.
            Unsupported: an adopted server, which inferactors never signals.
        """
        member = self._loaded(name)
        assert member.handle is not None
        await member.runtime.stop(member.handle, self.stop_grace_s)
        return await self._fresh(member)

    async def restart(self, name: str) -> InstanceView:
        """Stop the server if it runs, then start it (as `InferRuntime.restart`)."""
        member = self._loaded(name)
        assert member.handle is not None
        await member.runtime.restart(member.handle, self.stop_grace_s)
        return await self._fresh(member)

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
            self._by_iid[member.handle.instance_id] = member
            self.metrics.track([member.view()])

    def forget(self, member: Member) -> None:
        """Stop routing events to ``member`` (it was unloaded)."""
        if member.handle is not None and self._by_iid.get(member.handle.instance_id) is member:
            del self._by_iid[member.handle.instance_id]

    def changed(self, member: Member) -> None:
        """A member's view changed: settle, decide whether anything is left, and wake
        `until_changed` (`Keeper`)."""
        self._views_changed.set()
        self._views_changed = trio.Event()
        standings = [m.standing() for m in self.members.values()]
        if not self.settled.is_set() and fleet_exit.settled(standings):
            self.settled.set()
            self.note(Lifecycle.SETTLED, _summary(self.views()))
        if self.settled.is_set() and fleet_exit.nothing_left(standings):
            self.nothing_left.set()

    def on_event(self, event: Event) -> None:
        """One event of any runtime: kept, counted, passed on, and its member marked."""
        self._events.append(event)
        self.metrics.observe(event)
        for follower in list(self._followers):
            try:
                follower.send_nowait(event)
            except trio.WouldBlock:
                pass  # a slow follower loses events; the runtimes never wait for one
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._followers.discard(follower)
        iid = instance_of(event)
        member = None if iid is None else self._by_iid.get(iid)
        if member is not None:
            member.hear(event)

    def admit(self, name: str, placement: Placement, host: RuntimeHost) -> Member:
        """Add a member and start its task (load, start, keep)."""
        member = Member(name, placement, host)
        self.members[name] = member
        self._nursery.start_soon(keep, member, self)
        return member

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
        member.update(await member.runtime.status(member.handle), self)
        return member.view()

    async def close(self) -> None:
        """STOPPING, then every managed server stopped and every runtime closed; then the
        followers' channels (events, output lines) end after what they hold, and `closed`
        is set (even when this is cancelled)."""
        self.closing = True
        try:
            self.note(Lifecycle.STOPPING, "stopping")
            for member in self.members.values():
                member.scope.cancel()
            async with trio.open_nursery() as nursery:
                for host in self.hosts:
                    nursery.start_soon(host.close)
        finally:
            for follower in list(self._followers):
                follower.close()
            self.edges.logs.close()
            self.closed.set()


def orphan_words(orphan: ReapedOrphan) -> str:
    """One line for the operator about a server an earlier life left behind, in words: its
    pid, process group, program and port, the record it was found by, what was done."""
    done = f"{orphan.outcome.value} ({orphan.detail})"
    if orphan.pid is None:
        return (
            f"found an unreadable record of an earlier life's server, {orphan.record_path}: {done}"
        )
    about = [f"process group {orphan.pgid}"] if orphan.pgid is not None else []
    about += [orphan.program] if orphan.program is not None else []
    about += [f"port {orphan.port}"] if orphan.port is not None else []
    listed = f" ({', '.join(about)})" if about else ""
    return (
        f"found a server left by an earlier life: pid {orphan.pid}{listed}, "
        f"by its record {orphan.record_path}: {done}"
    )


def _summary(views: tuple[InstanceView, ...]) -> str:
    running = sum(1 for view in views if view.status.state is InstanceState.RUNNING)
    return f"{running} of {len(views)} running"


@contextlib.asynccontextmanager
async def open_fleet(
    config: RunConfig,
    run_file: Path,
    *,
    say: Say = say_nothing,
    stop_grace_s: float = STOP_GRACE_S,
    edges: Edges | None = None,
) -> AsyncIterator[Fleet]:
    """Supervise every instance of ``config`` (read from ``run_file``) for the block.

    The runtimes are open when the block begins; every instance is being loaded and
    started in the background (`Fleet.settled` tells when that is over). ``say`` hears
    what the fleet has to tell the operator (started, refused, first deep health).
    ``edges`` replaces the I/O edges of every runtime (its ``on_probe`` is the metrics').
    Leaving the block (even by cancellation) stops every managed server (SIGTERM,
    ``stop_grace_s`` float seconds, SIGKILL) and closes the runtimes.

    Raises:
        InvalidConfig: no instances, or a runtime's settings are malformed.
        InvalidState: another supervisor holds a data_root.
        BackendError: a data_root cannot be made.
    """
    config.require_instances()
    try:
        async with _fleet_of(config, run_file, say, stop_grace_s, edges) as fleet:
            yield fleet
    except BaseExceptionGroup as group:
        raise _single(group) from None


@contextlib.asynccontextmanager
async def _fleet_of(
    config: RunConfig, run_file: Path, say: Say, stop_grace_s: float, edges: Edges | None
) -> AsyncIterator[Fleet]:
    wanted = placements(config)
    metrics = FleetMetrics.create()
    edges = attrs.evolve(edges or Edges(), on_probe=metrics.on_probe)
    async with trio.open_nursery() as nursery:
        fleet = Fleet(run_file, state_dir_of(config), say, metrics, edges, stop_grace_s, nursery)
        try:
            for name, placement in wanted.items():
                host = fleet.host_for(placement) or await fleet.open_host(placement)
                fleet.admit(name, placement, host)
            nursery.start_soon(_say_when_started, fleet)
            yield fleet
        finally:
            with trio.move_on_after(stop_grace_s + CLOSE_MARGIN_S, shield=True):
                await fleet.close()
            nursery.cancel_scope.cancel()


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


async def _say_when_started(fleet: Fleet) -> None:
    for member in list(fleet.members.values()):
        await member.first_done.wait()
    if fleet.closing:
        return  # start-up was cut short, not waited out
    views = fleet.views()
    up = sum(1 for view in views if view.refused is None and not fleet.members[view.name].retrying)
    retrying = sum(1 for member in fleet.members.values() if member.retrying)
    more = f"; {retrying} adopted server(s) not answering, retried" if retrying else ""
    fleet.say(f"supervising {up} of {len(views)} instance(s){more}; Ctrl-C stops")
