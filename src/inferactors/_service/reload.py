"""`reload_fleet`: re-read the run file and apply only what changed.

1. `Lifecycle.RELOADING`. Read and validate ALL of the new run file (the one loader,
   `load_run_file`, which fills in what it left out as at start), then a non-empty
   ``instances``, no instance on the supervisor's own addresses, every runtime's settings)
   and the trust anchor files it names (``reload_anchors.py``). A setting that cannot
   change while the supervisor runs is refused as needing a restart: the state directory
   (``[managed] data_root``, where the control socket, the server logs, the records and
   the lock live) and the
   ``[front_door]`` that is served (its clients hold its address;
   ``fleet_front_door.py``). Then admit every instance to be loaded dry
   (``reload_check.py``: its model, flags, API key file, run_as, ...): any error raises
   `InvalidConfig` and nothing has changed.
2. Bind the ``[front_door]`` the reload adds, if any, and open the runtimes the new file
   needs that are not open yet (same flavor and mode but other settings: a new one). An
   address that cannot be bound, or a runtime that cannot be opened, closes what was just
   opened and raises `InvalidConfig`: still nothing has changed.
3. Give the anchors to every open registry; when they changed, check the models of the
   instances left running again: one that no longer verifies is held down as
   ``tampered``, listed in `ReloadResult.tampered` (the reload still succeeds). Drain
   (`Fleet.drainer`, ``drain.py``) then stop and unload the removed and changed
   instances, and unload the revived ones (`plan_reload`: by each instance's own effective
   settings), then load and start the added, changed and revived ones, concurrently.
   Unchanged instances keep their server (same pid) and the runtime they run in, even when
   that runtime was built from settings that changed for others; a runtime no instance
   runs in any more is closed. ``[managed.logs]`` is applied to every instance's output
   ring as it is. One refused at its load or start (its port held by another process,
   ...) is listed in `ReloadResult.refused`.
   Then the scheduler follows: the kept instances keep their state in it
   (`FleetDoor.rebind`); when the new file is the first to want one (an on-demand
   instance, ``[front_door]`` or ``[residency]``) it is opened, and the reload returns
   once it is open; an added ``[front_door]`` is served over it.
4. `Lifecycle.RELOADED` with the summary (``failed`` when refused, or when any instance
   was refused); return the `ReloadResult`.

Reloads are serialised (`Fleet.reload_lock`). The call returns once each loaded instance's
first load and start returned (or were refused), not once it is Running.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import attrs
import trio

from .._config.front_door import FrontDoorConfig
from .._config.runfile import Endpoint, RunConfig
from .._config.state_dir import state_dir_of
from .._edges.bundle import Edges
from .._errors import InferactorsError, InvalidConfig, one_line
from .._models.anchors import TrustAnchors
from .._policy.reload_plan import Placement, ReloadPlan, placements, plan_reload
from .drain import DRAIN_S, Drainer
from .fleet_door import FleetDoor
from .fleet_front_door import bind_front_door, front_door_added
from .hosts import RuntimeHost, Say
from .members import Member
from .metrics import FleetMetrics
from .reload_anchors import read_anchors, unchanged_tampered, use_anchors
from .reload_check import check_loading
from .run_defaults import load_run_file
from .views import InstanceView, Lifecycle, ReloadResult


class Fleet(Protocol):
    """What a reload uses of the `Fleet` (``fleet.py``, which calls `reload_fleet`)."""

    run_file: Path
    state_dir: Path
    reserved: tuple[Endpoint, ...]
    members: dict[str, Member]
    hosts: list[RuntimeHost]
    reload_lock: trio.Lock
    say: Say
    metrics: FleetMetrics
    edges: Edges
    door: FleetDoor | None
    front_door: FrontDoorConfig | None
    drainer: Drainer

    def views(self) -> tuple[InstanceView, ...]: ...
    def open_door(self, config: RunConfig) -> bool: ...
    async def serve_front_door(self, config: FrontDoorConfig, listener: socket.socket) -> str: ...
    def note(self, kind: Lifecycle, detail: str, failed: bool = False) -> None: ...
    def forget(self, member: Member) -> None: ...
    def changed(self, member: Member) -> None: ...
    def admit(self, name: str, placement: Placement, host: RuntimeHost) -> Member: ...
    def host_for(self, placement: Placement) -> RuntimeHost | None: ...
    async def open_host(self, placement: Placement) -> RuntimeHost: ...


def read_run_file(fleet: Fleet) -> tuple[RunConfig, dict[str, Placement]]:
    """The run file, validated whole, and its placements.

    Raises:
        InvalidConfig: any problem, with the file's path; a state directory other than
            the one the supervisor runs with, or a change of the ``[front_door]`` it
            serves, needs a restart.
    """
    config, _ = load_run_file(fleet.run_file)  # said at start
    config.require_instances()
    try:
        for endpoint in fleet.reserved:
            endpoint.check(config)
        _same_state_dir(fleet.state_dir, state_dir_of(config))
        front_door_added(fleet.front_door, config.front_door)
        return config, placements(config)
    except InvalidConfig as error:
        raise InvalidConfig(f"{fleet.run_file}: {error}") from None


def _same_state_dir(running: Path, wanted: Path) -> None:
    if wanted != running:
        raise InvalidConfig(
            f"$.managed.data_root: the state directory would move from {running} to "
            f"{wanted}; it holds the control socket, the server logs and records and the "
            "supervisor's lock, so it cannot change while the supervisor runs: it needs a "
            "restart of inferactors run (nothing changed)"
        )


async def reload_fleet(fleet: Fleet) -> ReloadResult:
    """Apply the run file as it is now to ``fleet`` (module docstring).

    Raises:
        InvalidConfig: the run file is invalid or needs a restart, an instance to load
            fails its dry admission, or a runtime it needs cannot be opened; nothing
            changed.
    """
    async with fleet.reload_lock:
        fleet.note(Lifecycle.RELOADING, "reloading")
        try:
            ready = await _prepare(fleet)
        except InvalidConfig as error:
            fleet.note(Lifecycle.RELOADED, one_line(f"reload refused: {error}"), failed=True)
            raise
        listener = ready.listener
        tampered: tuple[tuple[str, str], ...] = ()
        try:
            if use_anchors(fleet.hosts, ready.anchors):  # before any load: loads verify with them
                kept = [fleet.members[name] for name in ready.plan.unchanged]
                tampered = await unchanged_tampered(kept)
            refused = await _apply(fleet, ready.plan, ready.wanted)
            await _follow(fleet, ready.config)
            if listener is not None and ready.config.front_door is not None:
                taken, listener = listener, None  # closed by the front door from now on
                await fleet.serve_front_door(ready.config.front_door, taken)
        finally:
            if listener is not None:
                listener.close()
        fields = attrs.asdict(ready.plan, recurse=False)
        result = ReloadResult(**fields, refused=refused, tampered=tampered)
        fleet.note(Lifecycle.RELOADED, describe(result), failed=bool(refused))
        return result


@attrs.frozen
class _Ready:
    """A reload that passed every check: its plan, the new file, the socket of the
    ``[front_door]`` it adds (bound; None when it adds none), the trust anchors (their
    files read again)."""

    plan: ReloadPlan
    wanted: dict[str, Placement]
    config: RunConfig
    listener: socket.socket | None
    anchors: TrustAnchors


async def _prepare(fleet: Fleet) -> _Ready:
    """The plan, once the new file and its anchors are valid, its instances to load pass
    their dry admission, the front door it adds is bound and the runtimes they need are
    open. Raises `InvalidConfig`."""
    config, wanted = read_run_file(fleet)
    try:
        anchors = await read_anchors(config)
    except InvalidConfig as error:
        raise InvalidConfig(f"{fleet.run_file}: {error}") from None
    current = {name: member.placement for name, member in fleet.members.items()}
    held = {name for name, member in fleet.members.items() if member.held_down()}
    plan = plan_reload(current, wanted, held)
    loading = {name: wanted[name] for name in plan.to_load}
    await check_loading(fleet.run_file, loading, fleet.hosts, fleet.edges)
    added = front_door_added(fleet.front_door, config.front_door)
    try:
        listener = None if added is None else bind_front_door(added)
    except InvalidConfig as error:
        raise InvalidConfig(f"{fleet.run_file}: {error}") from None
    try:
        await _open_hosts(fleet, loading.values())
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    return _Ready(plan, wanted, config, listener, anchors)


async def _follow(fleet: Fleet, config: RunConfig) -> None:
    """The scheduler follows the reload: opened when this file is the first to want one
    (returns once it is open), else given the members as they are now."""
    if fleet.open_door(config):
        assert fleet.door is not None
        await fleet.door.opened.wait()
    elif fleet.door is not None:  # kept instances keep their state
        await fleet.door.rebind(list(fleet.members.values()), config.residency)


def describe(result: ReloadResult) -> str:
    """``"reloaded: added a; changed b; removed c; 2 unchanged"`` (one line)."""
    parts = [
        f"{word} {', '.join(names)}"
        for word, names in (
            ("added", result.added),
            ("changed", result.changed),
            ("removed", result.removed),
            ("revived", result.revived),
        )
        if names
    ]
    parts.append(f"{len(result.unchanged)} unchanged")
    parts.extend(f"refused {name}: {why}" for name, why in result.refused)
    parts.extend(f"held down as tampered {name}: {why}" for name, why in result.tampered)
    return "reloaded: " + "; ".join(parts)


async def _apply(
    fleet: Fleet, plan: ReloadPlan, wanted: dict[str, Placement]
) -> tuple[tuple[str, str], ...]:
    """Drain and unload, load and start as planned; the (name, reason) of each refused."""
    loading = {name: wanted[name] for name in plan.to_load}
    going = [fleet.members[name] for name in plan.to_unload]
    serving = {*plan.removed, *plan.changed}  # revived ones are held down: nothing in flight
    async with trio.open_nursery() as nursery:
        for member in going:
            nursery.start_soon(_unload, fleet, member, member.name in serving)
    for name in plan.removed:
        handle = fleet.members.pop(name).handle
        fleet.metrics.forget(name)
        ring = None if handle is None else fleet.edges.logs.get(handle.instance_id)
        if ring is not None:  # a `logs -f` of a removed instance ends
            ring.end_followers()
    for member in going:  # a flavor or mode changed: its series have other labels now
        if (
            member.name in wanted
            and wanted[member.name].runtime_key != member.placement.runtime_key
        ):
            fleet.metrics.forget(member.name)
    for name in plan.unchanged:  # same process, same runtime: the newest file's words
        fleet.members[name].placement = wanted[name]
    members = []
    for name, placement in loading.items():
        host = fleet.host_for(placement)
        assert host is not None
        members.append(fleet.admit(name, placement, host))
    _reorder(fleet, wanted)
    await _close_unused(fleet)
    for member in members:
        await member.first_done.wait()
    _resize_rings(fleet)
    for member in members:
        fleet.changed(member)
    fleet.metrics.track(fleet.views())
    return tuple((m.name, m.refused) for m in members if m.refused is not None)


async def _open_hosts(fleet: Fleet, loading: Iterable[Placement]) -> None:
    """Open every runtime the loading placements need that is not open; on a failure,
    close those opened here and raise `InvalidConfig`."""
    fresh: list[RuntimeHost] = []
    try:
        for placement in loading:
            if fleet.host_for(placement) is None:
                fresh.append(await fleet.open_host(placement))
    except InferactorsError as error:
        for host in fresh:
            fleet.hosts.remove(host)
            await host.close()
        raise InvalidConfig(f"{fleet.run_file}: cannot open a runtime: {error}") from None


async def _unload(fleet: Fleet, member: Member, drain: bool) -> None:
    """Drain ``member`` (when it may serve requests), then stop and unload it."""
    if drain and member.handle is not None:
        with trio.move_on_after(DRAIN_S):
            await fleet.drainer.drain(member.name, DRAIN_S)
    member.scope.cancel()
    fleet.forget(member)
    if member.handle is None:
        return
    try:
        await member.runtime.unload(member.handle)
    except InferactorsError as error:
        fleet.say(one_line(f"{member.name}: unload: {error}"), instance=member.name)


async def _close_unused(fleet: Fleet) -> None:
    """Close every runtime no member runs in (its settings changed for all of them)."""
    used = {id(member.host) for member in fleet.members.values()}
    for host in list(fleet.hosts):
        if id(host) not in used:
            fleet.hosts.remove(host)
            await host.close()


def _resize_rings(fleet: Fleet) -> None:
    """``[managed.logs]`` as the file says it now, for every instance's output ring (also
    a changed one's: its ring outlived its unload)."""
    for member in fleet.members.values():
        managed = member.placement.runtime.managed
        ring = None if member.handle is None else fleet.edges.logs.get(member.handle.instance_id)
        if managed is not None and ring is not None:
            ring.resize(managed.logs)


def _reorder(fleet: Fleet, wanted: dict[str, Placement]) -> None:
    """Members in the new file's order."""
    members = fleet.members
    fleet.members = {name: members[name] for name in wanted if name in members}
