"""The network I/O edge of the exposure and identity checks: socket tables, interfaces, connects.

Everything here reads the OS (psutil) or opens TCP connections (trio); every decision is in
`_exposure`. The runtime talks to it through the `NetScanner` protocol, and
`SystemNetScanner` is the real one, so tests of the supervisor can swap it.

Sources: seed-behaviour.md section 4 "Exposure" (active TCP connects with a 300 ms timeout to
every local address, concurrently); issue 3 item 4 (also the listening sockets of the whole
process tree, checked at least every 250 ms); issue 3 item 5 and FC-14 (the socket on our port
must belong to our process group); checklist items 59 and 60.

``INFERACTORS_LAN_ADDRESSES``: when set, a comma-separated list of IP addresses that replaces
the interface addresses as the targets of the connect check, taken exactly as given (loopback
included; an empty value means no connect check). It is meant for tests, which set it to
``127.0.0.2`` so that no test connection ever leaves loopback, and for hosts with so many
addresses that connecting to each of them would be wasteful.

Permissions: as root every socket's process is visible. Without root, on Linux, sockets of
other users' processes are listed without a pid, so `port_owner` returns None for them (and
`owned_by(None, ...)` is False: such a listener is never taken for ours); on macOS
``psutil.net_connections`` needs root and `port_owner` returns None. `tree_listeners` only
ever reads our own server's processes, which we may always inspect unless they run as
another user (root then sees them).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Protocol

import attrs
import psutil
import trio

from .._errors import InvalidConfig
from .._policy.exposure import (
    Exposure,
    Listener,
    find_exposure,
    lan_addresses,
    owner_pid,
    parse_address,
)
from .netcheck import accepts_connections

LAN_ADDRESSES_ENV = "INFERACTORS_LAN_ADDRESSES"
"""Environment variable that overrides the connect check's target addresses (comma-separated)."""

CONNECT_TIMEOUT_S = 0.3
"""How long one exposure connect may take before the address counts as not answering (s)."""

_INET_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class Connect(Protocol):
    """A TCP connect check, as `_netcheck.accepts_connections`: True if ``host:port`` accepted."""

    async def __call__(self, host: str, port: int, *, timeout_s: float) -> bool: ...


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
        cheap first answer to "is the listener on our port ours?" (FC-14)."""
        ...

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        """Whether ``pid`` is alive and in the process group ``group_pgid``."""
        ...

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        """Every socket listening on TCP ``port``, whatever its address (issue 9 item 5:
        a server on the other address family than the one we probe)."""
        ...


def local_addresses(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The addresses the exposure connect check tries, from ``environ`` (default ``os.environ``).

    With ``INFERACTORS_LAN_ADDRESSES`` set: exactly its comma-separated entries (blanks
    skipped, duplicates dropped, order kept). Otherwise the IPv4 and IPv6 addresses of every
    interface (``psutil.net_if_addrs()``) passed through `lan_addresses`.

    Raises:
        InvalidConfig: an entry of ``INFERACTORS_LAN_ADDRESSES`` is not an IP address.
    """
    env = os.environ if environ is None else environ
    override = env.get(LAN_ADDRESSES_ENV)
    if override is not None:
        return _parse_override(override)
    return lan_addresses(_interface_addresses())


def _parse_override(raw: str) -> tuple[str, ...]:
    entries = [entry.strip() for entry in raw.split(",") if entry.strip()]
    for entry in entries:
        if parse_address(entry) is None:
            raise InvalidConfig(f"{LAN_ADDRESSES_ENV}: {entry!r} is not an IP address")
    return tuple(dict.fromkeys(entries))


def _interface_addresses() -> list[str]:
    return [
        item.address
        for items in psutil.net_if_addrs().values()
        for item in items
        if item.family in _INET_FAMILIES
    ]


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


async def reachable_on(
    port: int,
    addresses: Iterable[str],
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    connect: Connect = accepts_connections,
) -> tuple[str, ...]:
    """The addresses on which ``port`` accepts a TCP connection, in the order given.

    Tries every address at once (one task each), each connect bounded by ``timeout_s``
    (float seconds, default 0.3), so the whole check takes at most about ``timeout_s``.
    An address that refuses, fails or does not answer in time is left out. Source:
    seed-behaviour.md section 4, ``reachable_beyond_loopback``.
    """
    targets = tuple(dict.fromkeys(addresses))
    answered: set[str] = set()

    async def try_one(address: str) -> None:
        if await connect(address, port, timeout_s=timeout_s):
            answered.add(address)

    async with trio.open_nursery() as nursery:
        for address in targets:
            nursery.start_soon(try_one, address)
    return tuple(address for address in targets if address in answered)


def _gather(pid: int) -> tuple[tuple[Listener, ...], tuple[str, ...]]:
    return tree_listeners(pid), local_addresses()


async def scan(
    pid: int,
    port: int,
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    connect: Connect = accepts_connections,
) -> Exposure | None:
    """Whether the server rooted at ``pid`` and serving on ``port`` is reachable beyond loopback.

    Reads the process tree's listening sockets and the local addresses in a worker thread
    (`tree_listeners`, `local_addresses`), then connects to ``port`` on every such address
    (`reachable_on`), and lets `find_exposure` decide. Measured here: median 7.7 ms for a
    two-process tree and one target (psutil parses the TCP tables once per process, about
    3.5 ms each), so it can run every 250 ms; plus up to ``timeout_s`` when a target hangs.

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
    `_exposure.owner_pid` (an exact binding beats a wildcard). None when nothing listens, and
    also when the listener's pid cannot be seen (see the module notes on permissions). A
    socket held by several processes (inherited across a fork) is reported under one of
    them, as psutil lists it. Blocking (reads every process's file descriptors in ``/proc``,
    about 4 ms with 80 processes). Source: issue 3 item 5, FC-14.
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
    asked. Source: issue 3 item 5, FC-14 (never take an impostor's answers for ours).
    """
    if pid is None:
        return False
    try:
        return os.getpgid(pid) == group_pgid
    except OSError:
        return False


@attrs.frozen
class SystemNetScanner:
    """The real `NetScanner`: psutil and TCP connects of ``connect_timeout_s`` (float seconds)."""

    connect_timeout_s: float = CONNECT_TIMEOUT_S

    async def scan(self, pid: int, port: int) -> Exposure | None:
        """See the module function `scan`."""
        return await scan(pid, port, timeout_s=self.connect_timeout_s)

    async def port_owner(self, host: str, port: int) -> int | None:
        """See the module function `port_owner` (run in a worker thread)."""
        return await trio.to_thread.run_sync(port_owner, host, port)

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        """See the module function `tree_owner` (run in a worker thread)."""
        return await trio.to_thread.run_sync(tree_owner, pid, host, port)

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        """See the module function `owned_by`."""
        return owned_by(pid, group_pgid)

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        """See the module function `listeners_on` (run in a worker thread)."""
        return await trio.to_thread.run_sync(listeners_on, port)
