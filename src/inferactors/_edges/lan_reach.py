"""Which of the host's own addresses answer a TCP connect to a port: the exposure connect
check's targets (`local_addresses`) and the concurrent connects (`reach_on`), each read
by the lateness rule (``netcheck.connect_reach``). Split from ``netscan``.

``INFERACTORS_LAN_ADDRESSES`` (comma-separated IPs, taken as given; empty: no connect check)
replaces the interface addresses as the targets (tests use ``127.0.0.2``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

import psutil
import trio

from .._errors import InvalidConfig
from .._policy.exposure import lan_addresses, parse_address
from .._policy.lateness import Reach
from .netcheck import connect_reach

LAN_ADDRESSES_ENV = "INFERACTORS_LAN_ADDRESSES"
"""Environment variable that overrides the connect check's target addresses (comma-separated)."""

CONNECT_TIMEOUT_S = 0.3
"""How long one exposure connect may take before the address counts as not answering (s)."""

_INET_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class Connect(Protocol):
    """A TCP connect check, as `netcheck.connect_reach`: what a connect to ``host:port``
    says (reachable, not reachable, or no verdict)."""

    async def __call__(self, host: str, port: int, *, timeout_s: float) -> Reach: ...


def local_addresses(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The addresses the exposure connect check tries, from ``environ`` (default ``os.environ``).

    With ``INFERACTORS_LAN_ADDRESSES`` set: exactly its comma-separated entries (blanks
    skipped, duplicates dropped, order kept). Otherwise the IPv4 and IPv6 addresses of every
    interface (``psutil.net_if_addrs()``) passed through `lan_addresses`.

    The interface addresses are read at most every `INTERFACES_REUSE_S` seconds.

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


INTERFACES_REUSE_S = 5.0
"""How long one read of the host's interface addresses answers (float seconds, monotonic):
the connect check of a thousand adopted servers asked psutil for them each time."""

_interfaces: tuple[float, list[str]] = (-INTERFACES_REUSE_S, [])


def _interface_addresses() -> list[str]:
    global _interfaces
    read_at, found = _interfaces
    now = time.monotonic()
    if now - read_at < INTERFACES_REUSE_S:
        return found
    found = [
        item.address
        for items in psutil.net_if_addrs().values()
        for item in items
        if item.family in _INET_FAMILIES
    ]
    _interfaces = (now, found)
    return found


async def reach_on(
    port: int,
    addresses: Iterable[str],
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    connect: Connect = connect_reach,
) -> dict[str, Reach]:
    """What a TCP connect to ``port`` says on each address (duplicates dropped, order kept).

    Tries every address at once (one task each), each connect bounded by ``timeout_s``
    (float seconds, default 0.3), so the whole check takes at most about ``timeout_s``.
    Silence is never reachable (`netcheck.connect_reach`).
    """
    targets = tuple(dict.fromkeys(addresses))
    said: dict[str, Reach] = {}

    async def try_one(address: str) -> None:
        said[address] = await connect(address, port, timeout_s=timeout_s)

    async with trio.open_nursery() as nursery:
        for address in targets:
            nursery.start_soon(try_one, address)
    return {address: said[address] for address in targets}


async def reachable_on(
    port: int,
    addresses: Iterable[str],
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    connect: Connect = connect_reach,
) -> tuple[str, ...]:
    """The addresses on which ``port`` accepts a TCP connection, in the order given
    (`reach_on`, keeping the reachable ones)."""
    said = await reach_on(port, addresses, timeout_s=timeout_s, connect=connect)
    return tuple(address for address, reach in said.items() if reach is Reach.REACHABLE)
