"""The kernel's table of listening TCP sockets, read once per tick for the whole runtime.

`SocketTable` is one per runtime (inside `SystemNetScanner`, one field of `Edges`). It asks
the kernel through a raw netlink socket diagnostics socket (``sock_diag``, `SockDiag`) for
the sockets in the LISTEN state only, of both families, optionally only those on one port
(the kernel filters by state and port, so connections and TIME_WAIT sockets cost
nothing). Each socket comes with its inode; the pid holding it is looked up only when a
caller needs it (`holder`, `holders_in_tree`) and then kept by inode, which is unique while
the socket lives.

Costs measured here (2 cores, CPU per query): a dump of one port, both families, about
30 us; of all listeners about 60 us plus 1.7 us per listener (121 us with 53), inline on
the trio thread, never in a worker thread that holds the GIL (pyroute2, used before, took
400 us per port and 3.3 ms for the same 53: it decodes each message through generic
classes and runs an asyncio loop per query); reading a process tree's descriptors
(``/proc/<pid>/fd`` links, no text parsing) about 0.1 ms a process; the psutil
whole-system table (for a listener outside the tree we asked about) 11 to 46 ms, in a
worker thread, at most once per listener.

Coalescing: a dump younger than `TICK_S` (50 ms) is the answer for every caller, so N
instances that ask in one tick cost one dump; a caller that finds a dump under way waits
for it. 50 ms is a quarter of the exposure watch's 200 ms period: a bind is seen at most
50 ms late, which keeps "stopped within 250 ms" reachable, while a runtime that asks
continuously dumps at most 20 times a second. `refresh_soon` (and a ``fresh`` read, which
`SystemNetScanner` asks for the first time it sees a process) drops the cached dumps.

Fallback: where netlink cannot be used (not Linux, ``EPERM``, gVisor), the first failure
is logged at debug and the table is read from then on through ``psutil.net_connections``
in a worker thread (pids known, inodes not, so nothing is cached by inode).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence

import attrs
import psutil
import trio

from .._policy.exposure import parse_address
from .proctable import descends_from
from .proctable import tree_sockets as tree_sockets  # tests count its reads here
from .sock_diag import SockDiag

TICK_S = 0.05
"""How long one dump answers every caller (float seconds); see the module notes."""

PSUTIL_REUSE_S = 1.0
"""One psutil whole-table read (for holders, 11 to 46 ms) answers every listener looked up
within this long (float seconds); a listener it does not show gets a fresh read."""

WHOLE_AT_PORTS = 4
"""From this many different ports asked for within `ASKED_WINDOW_S`, one whole dump may
answer them all, when it was timed cheaper than that many per-port dumps (50 managed
servers on a quiet host: one dump of about 60 listeners instead of 50 per-port dumps)."""

ASKED_WINDOW_S = 0.25
"""How far back the ports asked for are counted (float seconds): one exposure period."""

OUTSIDE_KEPT_S = 10.0
"""How long a listener found outside a server's tree is taken to stay outside (float
seconds): a socket handed into the tree (fd passing, then the giver closes its copy) keeps
its inode, so only a fresh look finds it; one walk per foreign holder every 10 s."""

CACHE_LIMIT = 65_536
"""Inode caches are emptied when they grow past this many entries (a bound, not a policy:
a dump prunes the inodes that closed, so they hold what listens now, per server asking).
Emptied, every listener is looked up again: 4,096 was under 1,000 listeners of another
program times 10 servers, and the lookups took a core (a few MiB at most)."""

_log = logging.getLogger(__name__)


@attrs.frozen
class SocketEntry:
    """One listening TCP socket: bound ``address`` and ``port``, its ``inode`` (0: unknown),
    and the ``pid`` holding it when the reader knew it (the psutil fallback), else None."""

    address: str
    port: int
    inode: int
    pid: int | None = None


Reader = Callable[[int | None], Sequence[SocketEntry]]
"""Reads the listening sockets on one port (None: all). Blocking. Raises `OSError` (or
anything else) when it cannot: the table then falls back to psutil."""


class NetlinkReader:
    """LISTEN sockets from the kernel through a raw netlink ``sock_diag`` socket
    (`sock_diag.SockDiag`), opened at the first read and closed when that trio run ends
    (a later run opens another), or by `close`; read outside trio (the listener watch's
    thread), it is closed by `close` or with the object."""

    def __init__(self) -> None:
        self._diag: SockDiag | None = None

    def __call__(self, port: int | None) -> list[SocketEntry]:
        diag = self._diag or self._connect()
        return [SocketEntry(*found) for found in diag.listeners(port)]

    def _connect(self) -> SockDiag:
        diag = SockDiag()
        diag.open()  # or OSError (not Linux, EPERM, gVisor): the table falls back
        self._diag = diag
        with contextlib.suppress(RuntimeError):  # outside trio: closed with the object
            trio.lowlevel.spawn_system_task(self._close_at_run_end, diag)
        return diag

    def close(self) -> None:
        """Close the socket now (a later read opens another)."""
        diag, self._diag = self._diag, None
        if diag is not None:
            diag.close()

    async def _close_at_run_end(self, diag: SockDiag) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self._diag = None
            diag.close()


def psutil_listeners(port: int | None) -> list[SocketEntry]:
    """LISTEN sockets from ``psutil.net_connections`` (the whole system table): pids known,
    inodes not (0). Blocking, 11 to 46 ms here. ``[]`` when the table may not be read."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return []
    return [
        SocketEntry(item.laddr.ip, item.laddr.port, 0, item.pid)
        for item in connections
        if item.status == psutil.CONN_LISTEN
        and item.laddr
        and (port is None or item.laddr.port == port)
    ]


@attrs.frozen
class _Dump:
    at: float
    entries: tuple[SocketEntry, ...]


@attrs.define(eq=False)
class SocketTable:
    """The runtime's shared view of listening sockets; see the module notes.

    ``read`` is the reader (None: netlink, falling back to psutil); ``tick_s`` how long a
    dump answers every caller (float seconds).
    """

    read: Reader | None = None
    tick_s: float = TICK_S
    _netlink: NetlinkReader | None = None
    _fallback: bool = False
    _cached: dict[int | None, _Dump] = attrs.Factory(dict)
    _pending: dict[int | None, trio.Event] = attrs.Factory(dict)
    _holders: dict[int, int | None] = attrs.Factory(dict)
    _in_tree: dict[tuple[int, int], int | None] = attrs.Factory(dict)
    _outside_since: dict[tuple[int, int], float] = attrs.Factory(dict)
    """When each (root, inode) was last found outside root's tree (trio time): that answer
    is kept `OUTSIDE_KEPT_S`, since a socket can be handed into the tree (fd passing)."""
    _asked: dict[int, float] = attrs.Factory(dict)
    _owners: tuple[float, dict[tuple[object, int], int]] = (-math.inf, {})
    _owners_read: trio.Event | None = None
    _cost: dict[str | None, float] = attrs.Factory(lambda: {None: 1.0, "port": 0.0})

    def refresh_soon(self) -> None:
        """Forget the cached dumps: the next caller reads the kernel again."""
        self._cached.clear()

    async def listeners(
        self, port: int | None = None, *, fresh: bool = False
    ) -> tuple[SocketEntry, ...]:
        """The listening sockets on ``port`` (None: all), from a dump younger than
        ``tick_s`` unless ``fresh``. Waits for a dump under way rather than starting one.
        Never raises for the kernel's sake (the fallback answers)."""
        if fresh:
            self._cached.pop(port, None)
            self._cached.pop(None, None)  # the whole dump answers a port too
        while True:
            known = self._recent(port)
            if known is not None:
                await trio.lowlevel.checkpoint()
                return known
            if port is not None and self._whole_is_cheaper(port):
                return tuple(e for e in await self.listeners(None) if e.port == port)
            pending = self._pending.get(port)
            if pending is None:
                return await self._refresh(port)
            await pending.wait()

    def _whole_is_cheaper(self, port: int) -> bool:
        """Whether one whole dump costs less than the per-port dumps being asked for: at
        least `WHOLE_AT_PORTS` ports asked within `ASKED_WINDOW_S`, and the last whole dump
        took less than that many per-port dumps (both timed as they ran)."""
        now = trio.current_time()
        self._asked[port] = now
        if len(self._asked) < WHOLE_AT_PORTS:
            return False
        self._asked = {p: at for p, at in self._asked.items() if now - at < ASKED_WINDOW_S}
        asked = len(self._asked)
        return asked >= WHOLE_AT_PORTS and self._cost[None] < asked * self._cost["port"]

    def _recent(self, port: int | None) -> tuple[SocketEntry, ...] | None:
        now = trio.current_time()
        whole = self._cached.get(None)
        if port is not None and whole is not None and now - whole.at < self.tick_s:
            return tuple(entry for entry in whole.entries if entry.port == port)
        mine = self._cached.get(port)
        return mine.entries if mine is not None and now - mine.at < self.tick_s else None

    async def _refresh(self, port: int | None) -> tuple[SocketEntry, ...]:
        done = self._pending[port] = trio.Event()
        try:
            began = time.perf_counter()
            entries = tuple(await self._read(port))
            self._cost[None if port is None else "port"] = time.perf_counter() - began
            self._cached[port] = _Dump(trio.current_time(), entries)
            if port is None:
                self._prune(entries)
            return entries
        finally:
            del self._pending[port]
            done.set()

    async def _read(self, port: int | None) -> Sequence[SocketEntry]:
        if self.read is not None and not self._fallback:
            try:
                return self.read(port)
            except Exception as error:  # any failure of the reader: fall back, once
                return await self._fall_back(error, port)
        if self._fallback:
            return await trio.to_thread.run_sync(psutil_listeners, port)
        if self._netlink is None:
            self._netlink = NetlinkReader()
        try:
            return self._netlink(port)
        except Exception as error:  # EPERM, no sock_diag (gVisor, not Linux), ...
            return await self._fall_back(error, port)

    async def _fall_back(self, error: Exception, port: int | None) -> Sequence[SocketEntry]:
        _log.debug("socket table: netlink sock_diag unusable (%r); reading psutil instead", error)
        self._fallback = True
        return await trio.to_thread.run_sync(psutil_listeners, port)

    def _prune(self, entries: Iterable[SocketEntry]) -> None:
        alive = {entry.inode for entry in entries}
        if len(self._holders) + len(self._in_tree) > CACHE_LIMIT:
            self._holders.clear()
            self._in_tree.clear()
            self._outside_since.clear()
        for inode in [inode for inode in self._holders if inode not in alive]:
            del self._holders[inode]
        for key in [key for key in self._in_tree if key[1] not in alive]:
            del self._in_tree[key]
            self._outside_since.pop(key, None)

    async def holders_in_tree(
        self, root: int, entries: Iterable[SocketEntry]
    ) -> dict[SocketEntry, int]:
        """The pid in ``root``'s process tree holding each of ``entries``, for those held
        there. Kept by (root, inode): a listener established as the tree's (or not) is not
        looked up again while its inode lives. Reads the tree's descriptors at most once
        per call, and psutil's whole table (a worker thread) for a socket outside it."""
        found: dict[SocketEntry, int] = {}
        tree: dict[int, int] | None = None
        descends: dict[int, bool] = {}  # holder -> in the tree: one walk up per holder
        for entry in entries:
            key = (root, entry.inode)
            if entry.inode and key in self._in_tree and self._still_known(key):
                pid = self._in_tree[key]
            else:
                if tree is None and not entry.pid:
                    tree = tree_sockets(root)
                pid = await self._tree_holder(root, entry, tree or {}, descends)
                if entry.inode:
                    self._in_tree[key] = pid
                    if pid is None:
                        self._outside_since[key] = trio.current_time()
            if pid is not None:
                found[entry] = pid
        return found

    def _still_known(self, key: tuple[int, int]) -> bool:
        """Whether the cached in-tree answer for ``key`` still stands: a holder in the tree
        does while the inode lives; "outside" for `OUTSIDE_KEPT_S`."""
        since = self._outside_since.get(key)
        return since is None or trio.current_time() - since < OUTSIDE_KEPT_S

    async def _tree_holder(
        self, root: int, entry: SocketEntry, tree: dict[int, int], descends: dict[int, bool]
    ) -> int | None:
        pid = tree.get(entry.inode) if entry.inode else None
        if pid is not None:
            self._holders[entry.inode] = pid
            return pid
        holder = await self.holder(entry, fresh=False)  # a scan never waits on fresh reads
        if holder is None:
            return None
        if holder not in descends:  # another program's 1,000 listeners: one walk, not 1,000
            descends[holder] = descends_from(holder, root)
        return holder if descends[holder] else None

    async def holder(self, entry: SocketEntry, *, fresh: bool = True) -> int | None:
        """The pid holding ``entry`` (any process), or None when it cannot be seen. Kept by
        inode; found in psutil's whole table (a worker thread), one read shared by every
        listener looked up within `PSUTIL_REUSE_S`, and (``fresh``) a fresh one when it is
        not there. Without ``fresh`` a listener the shared read does not show is None for
        now, not kept: an exposure scan of a storm of new listeners made thousands of fresh
        reads one after another (100 ms each with 3,000 listeners; a real exposure went
        unseen for 78 s and the supervisor stayed busy two minutes after the storm)."""
        if entry.pid is not None or not entry.inode:
            await trio.lowlevel.checkpoint()
            return entry.pid
        if entry.inode in self._holders:
            known = self._holders[entry.inode]  # read before the checkpoint: a prune may
            await trio.lowlevel.checkpoint()  # drop it meanwhile (the listener closed)
            return known
        where = (parse_address(entry.address), entry.port)
        pid = (await self._psutil_owners(fresh=False)).get(where)
        if pid is None and not fresh:
            return None
        if pid is None:
            pid = (await self._psutil_owners(fresh=True)).get(where)
        self._holders[entry.inode] = pid
        return pid

    async def _psutil_owners(self, *, fresh: bool) -> dict[tuple[object, int], int]:
        """(address, port) -> pid of every LISTEN socket, from one psutil read begun within
        `PSUTIL_REUSE_S` (``fresh``: begun after this call); callers share a read."""
        asked = trio.current_time()
        while True:
            began, owners = self._owners
            if asked - began < PSUTIL_REUSE_S and (began >= asked or not fresh):
                await trio.lowlevel.checkpoint()
                return owners
            if self._owners_read is None:
                break
            await self._owners_read.wait()
        self._owners_read = done = trio.Event()
        try:
            began = trio.current_time()
            listed = await trio.to_thread.run_sync(psutil_listeners, None)
            owners = {(parse_address(i.address), i.port): i.pid for i in listed if i.pid}
            self._owners = (began, owners)
            return owners
        finally:
            self._owners_read = None
            done.set()
