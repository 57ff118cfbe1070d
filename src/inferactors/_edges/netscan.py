"""The network I/O edge of the exposure and identity checks: socket tables, interfaces, connects.

Everything here reads the OS or opens TCP connections (trio); every decision is in
`exposure`. The runtime talks to it through the `NetScanner` protocol, and
`SystemNetScanner` is the real one, so tests of the supervisor can swap it.

`SystemNetScanner` answers from the runtime's one `SocketTable` (``socket_table``: the
kernel's LISTEN sockets through netlink, shared by every instance, one dump per 50 ms tick
at most) and looks a listener's pid up once per listener. The exposure
connect check runs on the first scan of a server, then about every 5 s per server
(`ConnectSchedule`, spread at random), and at once whenever the table shows a listener of
the server bound beyond loopback: the table answers the 200 ms watch, the connect only
confirms or catches what the table cannot show (a port forwarded to the server). The module
functions below are the blocking psutil readings: callers outside a runtime, the baseline.

The rules: active TCP connects with a 300 ms timeout to every local address, concurrently;
also the listening sockets of the whole process tree, checked at least every 250 ms; and
the socket on our port must belong to our process group (else it is an impostor's).

``INFERACTORS_LAN_ADDRESSES`` (comma-separated IPs, taken as given; empty: no connect check)
replaces the interface addresses as the connect check's targets (tests use ``127.0.0.2``).
A negative identity answer ("nobody", "not in our tree") is always read fresh, never from
a cached dump: it is what lets a request through, or calls a listener an impostor.

Permissions: as root every socket's process is visible. Without root, on Linux, sockets of
other users' processes are listed without a pid, so `port_owner` returns None for them (and
`owned_by(None, ...)` is False: such a listener is never taken for ours); on macOS
``psutil.net_connections`` needs root and `port_owner` returns None. `tree_listeners` only
ever reads our own server's processes, which we may always inspect unless they run as
another user (root then sees them).
"""

from __future__ import annotations

import os
from typing import Protocol

import attrs
import psutil
import trio

from .._config.binding import is_loopback_name
from .._policy.exposure import (
    Exposure,
    Listener,
    covers,
    find_exposure,
    owner_pid,
    parse_address,
)
from .._policy.lateness import Reach
from .connect_schedule import ConnectSchedule as ConnectSchedule
from .lan_reach import CONNECT_TIMEOUT_S as CONNECT_TIMEOUT_S
from .lan_reach import LAN_ADDRESSES_ENV as LAN_ADDRESSES_ENV
from .lan_reach import Connect as Connect
from .lan_reach import local_addresses as local_addresses
from .lan_reach import reach_on as reach_on
from .lan_reach import reachable_on as reachable_on
from .listen_watch import ListenerWatch
from .netcheck import connect_reach
from .socket_table import CACHE_LIMIT, SocketEntry, SocketTable


class NetScanner(Protocol):
    """What the runtime asks of the network edge (`SystemNetScanner` is the real one)."""

    async def scan(self, pid: int, port: int) -> Exposure | None:
        """The exposure of the server whose process tree starts at ``pid``, or None."""
        ...

    async def port_owner(self, host: str, port: int) -> int | None:
        """The pid listening on ``host:port`` (or a wildcard covering it), or None."""
        ...

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        """The pid in ``pid``'s process tree bound to exactly ``host:port``, or None: the
        cheap first answer to "is the listener on our port ours?"."""
        ...

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        """Whether ``pid`` is alive and in the process group ``group_pgid``."""
        ...

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        """Every socket listening on TCP ``port``, whatever its address (a
        server on the other address family than the one we probe)."""
        ...

    async def port_exposure(self, port: int) -> Exposure | None:
        """Whether whatever listens on TCP ``port`` is reachable beyond loopback: that port's
        listeners only (an adopted server, whose process is not ours to walk)."""
        ...

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        """Wait until the host's listeners beyond loopback may differ from those of
        ``generation`` (0: none seen), or until trio time ``deadline``; return the
        generation to pass next time (see `listen_watch.ListenerWatch.changed`)."""
        ...


def tree_listeners(pid: int) -> tuple[Listener, ...]:
    """The TCP sockets in LISTEN state held by process ``pid`` and all its descendants.

    Processes that vanish, turn zombie or deny access while being read are skipped; a
    ``pid`` that is gone gives ``()``. Never raises for a process's sake. Blocking (reads
    ``/proc``): call it from a thread in async code, as `scan` does.
    """
    found: list[Listener] = []
    for process in _process_tree(pid):
        found.extend(_listeners_of(process))
    return tuple(found)


def tree_owner(pid: int, host: str, port: int) -> int | None:
    """The pid in ``pid``'s process tree whose listener is bound to exactly ``host:port``
    (an exact binding gets the connections), or None. Reads only that tree's sockets, about
    3.5 ms a process, instead of the whole system's table. Blocking."""
    host_ip = parse_address(host)
    for listener in tree_listeners(pid):
        if listener.port == port and parse_address(listener.address) == host_ip:
            return listener.pid
    return None


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _listeners_of(process: psutil.Process) -> list[Listener]:
    try:
        connections = process.net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [
        Listener(item.laddr.ip, item.laddr.port, process.pid)
        for item in connections
        if item.status == psutil.CONN_LISTEN
    ]


def _gather(pid: int) -> tuple[tuple[Listener, ...], tuple[str, ...]]:
    return tree_listeners(pid), local_addresses()


async def scan(
    pid: int,
    port: int,
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    connect: Connect = connect_reach,
) -> Exposure | None:
    """Whether the server rooted at ``pid`` and serving on ``port`` is reachable beyond loopback.

    The psutil baseline of `SystemNetScanner.scan`: the tree's listeners and the local
    addresses (a worker thread), a connect to each (`reachable_on`), `find_exposure` decides.

    Raises:
        InvalidConfig: ``INFERACTORS_LAN_ADDRESSES`` holds something that is not an address.
    """
    listeners, addresses = await trio.to_thread.run_sync(_gather, pid)
    reachable = await reachable_on(port, addresses, timeout_s=timeout_s, connect=connect)
    return find_exposure(listeners, reachable, port=port)


def listeners_on(port: int) -> tuple[Listener, ...]:
    """Every socket listening on TCP ``port`` (any address, any family), from the
    system-wide socket table; a socket whose pid cannot be seen is listed with pid 0.
    ``()`` when the table cannot be read. Blocking (about 11 ms here, as `port_owner`)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return ()
    return tuple(
        Listener(item.laddr.ip, item.laddr.port, item.pid or 0)
        for item in connections
        if item.status == psutil.CONN_LISTEN and item.laddr and item.laddr.port == port
    )


def port_owner(host: str, port: int) -> int | None:
    """The pid of the process listening on ``host:port`` or on a wildcard that covers it.

    Reads the system-wide TCP socket table (``psutil.net_connections``) and picks with
    `exposure.owner_pid` (an exact binding beats a wildcard). None when nothing listens, and
    also when the listener's pid cannot be seen (see the module notes on permissions). A
    socket held by several processes (inherited across a fork) is reported under one of
    them, as psutil lists it. Blocking (reads every process's file descriptors in ``/proc``,
    about 4 ms with 80 processes).
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return None
    listeners = [
        Listener(item.laddr.ip, item.laddr.port, item.pid)
        for item in connections
        if item.status == psutil.CONN_LISTEN and item.pid is not None and item.laddr
    ]
    return owner_pid(listeners, host, port)


def owned_by(pid: int | None, group_pgid: int) -> bool:
    """Whether process ``pid`` belongs to the process group ``group_pgid`` (our server's).

    False for None (no visible owner) and for a pid that no longer exists or cannot be
    asked: an impostor's answers are never taken for ours.
    """
    if pid is None:
        return False
    try:
        return os.getpgid(pid) == group_pgid
    except OSError:
        return False


@attrs.frozen
class SystemNetScanner:
    """The real `NetScanner`: the kernel's listening sockets (`SocketTable`, one per runtime,
    shared by every instance) and TCP connects of ``connect_timeout_s`` (float seconds),
    at most one per server every ``connects.every_s`` unless a listener already shows it
    exposed (see `scan`). Methods never block the loop on the socket tables."""

    connect_timeout_s: float = CONNECT_TIMEOUT_S
    table: SocketTable = attrs.field(factory=SocketTable)
    connects: ConnectSchedule = attrs.field(factory=ConnectSchedule)
    _seen: set[int] = attrs.field(factory=set)
    _watch: ListenerWatch = attrs.field(
        init=False, default=attrs.Factory(lambda self: ListenerWatch(self.table), takes_self=True)
    )

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        """See `NetScanner.listeners_changed`: one `ListenerWatch` over this scanner's
        table, shared by every caller."""
        return await self._watch.changed(generation, deadline)

    def _first_sight(self, pid: int) -> bool:
        """True the first time ``pid`` is asked about (a new process: read a fresh dump)."""
        if pid in self._seen:
            return False
        if len(self._seen) > CACHE_LIMIT:
            self._seen.clear()
        self._seen.add(pid)
        return True

    async def scan(self, pid: int, port: int) -> Exposure | None:
        """The exposure of the server rooted at ``pid`` serving on ``port``.

        The tree's listeners come from the shared table: only listeners bound beyond
        loopback are looked up (`SocketTable.holders_in_tree`, cached by inode), so a
        loopback-only server costs a share of one dump and no reads. The connect check
        (`reach_on`, seed behaviour) runs when such a listener is ours (evidence for
        the report) and otherwise on the `ConnectSchedule` (first scan, then about every
        5 s): the kernel table answers the 200 ms question, the connect catches what it
        cannot see (a forwarded port) a few seconds later. A connect that gave no verdict
        (silence on loopback, or our own loop late: ``_policy/lateness.py``) is never
        "reachable" and is tried again at the next scans (`ConnectSchedule.retry`).

        Raises:
            InvalidConfig: ``INFERACTORS_LAN_ADDRESSES`` holds something that is not an address.
        """
        listeners = await self._beyond_loopback(pid, fresh=self._first_sight(pid))
        due = bool(listeners) or self.connects.take(pid, port)
        said = await self._reach(port, due)
        if Reach.NO_VERDICT in said.values():
            self.connects.retry(pid, port)  # no verdict: check again soon, not in 5 s
        elif said:
            self.connects.settled(pid, port)
        reachable = tuple(a for a, reach in said.items() if reach is Reach.REACHABLE)
        if reachable and not listeners:  # bound since the dump? read the kernel again
            listeners = await self._beyond_loopback(pid, fresh=True)
            reachable = await self._not_foreign(pid, port, reachable)
        return find_exposure(listeners, reachable, port=port)

    async def _not_foreign(
        self, pid: int, port: int, reachable: tuple[str, ...]
    ) -> tuple[str, ...]:
        """The ``reachable`` addresses whose connect may have reached ``pid``'s tree: an
        address whose listeners on ``port`` are all outside the tree (another program's:
        anyone may listen on 192.0.2.2:P beside our 127.0.0.1:P; or held by no process, a
        socket in flight in a unix message) was not our server's exposure. One with no
        listener shown stays reachable: a forwarded port. The tree's sockets are ours to
        read (a supervisor that is not root runs its servers as itself)."""
        entries = [e for e in await self.table.listeners(port, fresh=True) if e.port == port]
        ours = await self.table.holders_in_tree(pid, entries)
        kept = []
        for address in reachable:
            covering = [e for e in entries if covers(e.address, address)]
            if not covering or any(e in ours for e in covering):
                kept.append(address)
        return tuple(kept)

    async def port_exposure(self, port: int) -> Exposure | None:
        """The exposure of whatever listens on ``port`` (an adopted server's): one per-port
        kernel query (no other port, no process walked; the holder of a listener beyond
        loopback is looked up once, for the report) and the connect check, every call:
        the caller paces it (`probe_look.ADOPTED_EXPOSURE_S`)."""
        entries = await self.table.listeners(port)
        beyond = [e for e in entries if e.port == port and not is_loopback_name(e.address)]
        listeners = [await self._listener(entry) for entry in beyond]
        said = await self._reach(port, True)
        reachable = tuple(a for a, reach in said.items() if reach is Reach.REACHABLE)
        return find_exposure(listeners, reachable, port=port)

    async def _reach(self, port: int, due: bool) -> dict[str, Reach]:
        """What a connect to ``port`` says on each local address, when ``due``; else {}."""
        if not due:
            return {}
        addresses = local_addresses()
        return await reach_on(port, addresses, timeout_s=self.connect_timeout_s)

    async def _beyond_loopback(self, pid: int, *, fresh: bool) -> list[Listener]:
        """The listeners of ``pid``'s tree bound beyond loopback, on any port: the runtime's
        whole LISTEN table (one dump per tick shared by every server's watch; a few
        microseconds per listener), its listeners beyond loopback looked up in the tree
        once per socket inode (`SocketTable.holders_in_tree`). A quiet server reads no
        process at all: only a listener beyond loopback it has not seen is looked up."""
        entries = await self.table.listeners(None, fresh=fresh)
        beyond = [e for e in entries if not is_loopback_name(e.address)]
        holders = await self.table.holders_in_tree(pid, beyond)
        return [Listener(item.address, item.port, holders[item]) for item in holders]

    async def port_owner(self, host: str, port: int) -> int | None:
        """See the module function `port_owner`; answered from the shared table, the
        holder of each listener looked up once per listener."""
        covering = await self._covering(host, port, fresh=False)
        if not covering:  # "nobody" lets a request through: never from a cached dump
            covering = await self._covering(host, port, fresh=True)
        found = [await self._listener(entry) for entry in covering]
        return owner_pid([item for item in found if item.pid], host, port)

    async def _covering(self, host: str, port: int, *, fresh: bool) -> list[SocketEntry]:
        entries = await self.table.listeners(port, fresh=fresh)
        return [e for e in entries if e.port == port and covers(e.address, host)]

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        """See the module function `tree_owner`. Identity is settled once per listener:
        while the table shows the same inode on ``host:port``, no process is read again."""
        host_ip = parse_address(host)
        fresh = self._first_sight(pid)
        while True:
            entries = await self.table.listeners(port, fresh=fresh)
            exact = [e for e in entries if e.port == port and parse_address(e.address) == host_ip]
            holders = await self.table.holders_in_tree(pid, exact)
            found = next((holders[entry] for entry in exact if entry in holders), None)
            if found is not None or fresh:
                return found
            fresh = True  # "not ours" is never said from a cached dump

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        """See the module function `owned_by`."""
        return owned_by(pid, group_pgid)

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        """See the module function `listeners_on`; from the shared table."""
        entries = await self.table.listeners(port)
        return tuple([await self._listener(entry) for entry in entries if entry.port == port])

    async def _listener(self, entry: SocketEntry) -> Listener:
        return Listener(entry.address, entry.port, await self.table.holder(entry) or 0)
