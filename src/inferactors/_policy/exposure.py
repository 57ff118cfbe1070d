"""Is a managed server reachable beyond loopback? Address classification and the decision (pure).

No I/O here: `netscan` gathers the facts (listening sockets of the server's process tree,
local addresses, which of them answer a TCP connect) and this module decides.

The rules:

- the local addresses are those left after dropping loopback, unspecified and IPv6
  ``fe80::/10`` addresses, sorted and deduplicated (`lan_addresses`); a server that answers
  on any of them is exposed;
- a server reachable on a non-loopback local address is stopped, a loopback-only server is
  left running;
- the listening sockets of the server's whole process tree count too, so a server that
  opens a second port on ``0.0.0.0`` is caught (`find_exposure`);
- which process listens on our port tells our server from an impostor (`owner_pid`,
  `covers`).

Addresses are strings as the OS reports them (``"127.0.0.1"``, ``"::"``, ``"fe80::1%eth0"``).
A string that is not an IP address is not a wildcard, and loopback only when it is
``localhost`` (`inferactors._config.binding.is_loopback_name`, the one loopback rule).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import TypeAlias

import attrs

from .._config.binding import is_loopback_name

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

_LINK_LOCAL_V6 = ipaddress.IPv6Network("fe80::/10")


def parse_address(address: str) -> IPAddress | None:
    """The address as an IPv4 address (IPv4-mapped IPv6 unwrapped) or IPv6 address.

    A zone suffix (``%eth0``) is kept on IPv6 addresses. Returns None, never raises, for a
    string that is not an IP address literal (a host name, a MAC address, ``""``).
    """
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def is_wildcard(address: str) -> bool:
    """Whether ``address`` is the unspecified address a socket binds to listen everywhere.

    True for ``0.0.0.0``, ``::`` and ``::ffff:0.0.0.0``.
    """
    parsed = parse_address(address)
    return parsed is not None and parsed.is_unspecified


def _is_lan(parsed: IPAddress) -> bool:
    if parsed.is_loopback or parsed.is_unspecified:
        return False
    return not (isinstance(parsed, ipaddress.IPv6Address) and parsed in _LINK_LOCAL_V6)


def _sort_key(parsed: IPAddress) -> tuple[int, int, str]:
    return (parsed.version, int(parsed), str(parsed))


def lan_addresses(addresses: Iterable[str]) -> tuple[str, ...]:
    """The local addresses worth a connect check, as in the reference's ``local_addrs()``.

    Drops loopback, unspecified and IPv6 link-local (``fe80::/10``) addresses and strings that
    are not IP addresses; normalises the rest (``::ffff:10.0.0.1`` becomes ``10.0.0.1``,
    IPv6 compressed); returns them deduplicated and sorted, IPv4 before IPv6, numerically.
    """
    parsed = (parse_address(address) for address in addresses)
    kept = {ip for ip in parsed if ip is not None and _is_lan(ip)}
    return tuple(str(ip) for ip in sorted(kept, key=_sort_key))


@attrs.frozen
class Listener:
    """A TCP socket in the LISTEN state: bound ``address``, ``port``, and the ``pid`` holding it.

    The same socket is listed once per process holding it (a forked child inherits it).
    """

    address: str
    port: int
    pid: int

    def endpoint(self) -> str:
        """``address:port``, with an IPv6 address in brackets (``[::]:8090``)."""
        return endpoint(self.address, self.port)


def endpoint(address: str, port: int | None) -> str:
    """``address:port`` (``[address]:port`` for IPv6); the bare address when ``port`` is None."""
    if port is None:
        return address
    if ":" in address:
        return f"[{address}]:{port}"
    return f"{address}:{port}"


@attrs.frozen
class Exposure:
    """Evidence that a server is reachable beyond loopback.

    Attributes:
        reachable_on: local addresses (no port) on which the serving port accepted a TCP
            connect, sorted and deduplicated; empty if only the socket table showed it.
        listeners: the non-loopback listening sockets of the server's process tree, sorted by
            (port, address, pid); empty if only the connect check showed it.
        port: the serving port the connect check tried, used by `describe`; None if unknown.
    """

    reachable_on: tuple[str, ...]
    listeners: tuple[Listener, ...]
    port: int | None = None

    def describe(self) -> str:
        """One line for status details and logs.

        For example ``"listening beyond loopback on 0.0.0.0:8090 (pid 123); reachable on
        192.0.2.2:8090"``; either half is left out when it has no evidence.
        """
        parts: list[str] = []
        if self.listeners:
            sockets = ", ".join(f"{item.endpoint()} (pid {item.pid})" for item in self.listeners)
            parts.append(f"listening beyond loopback on {sockets}")
        if self.reachable_on:
            where = ", ".join(endpoint(address, self.port) for address in self.reachable_on)
            lead = "reachable on" if self.listeners else "reachable beyond loopback on"
            parts.append(f"{lead} {where}")
        return "; ".join(parts)


def _listener_key(listener: Listener) -> tuple[int, str, int]:
    return (listener.port, listener.address, listener.pid)


def find_exposure(
    listeners: Iterable[Listener], reachable: Iterable[str], *, port: int | None = None
) -> Exposure | None:
    """The exposure shown by a scan, or None when the server keeps to loopback.

    Args:
        listeners: every listening socket of the server's process tree; those bound to a
            loopback address are ignored, any other (wildcard or a specific address) counts.
        reachable: the addresses on which the serving port accepted a connect. Taken as
            given: the caller chose which addresses to try (`lan_addresses`, or the
            ``INFERACTORS_LAN_ADDRESSES`` override, which tests point at ``127.0.0.2``).
        port: the serving port, kept for `Exposure.describe`.
    """
    beyond = {item for item in listeners if not is_loopback_name(item.address)}
    answered = sorted(set(reachable))
    if not beyond and not answered:
        return None
    return Exposure(tuple(answered), tuple(sorted(beyond, key=_listener_key)), port)


def covers(bound: str, host: str) -> bool:
    """Whether a socket bound to ``bound`` accepts connections addressed to ``host``.

    An exact address match; a wildcard of the same family (``0.0.0.0`` for IPv4); ``::``
    for any host, since a dual-stack socket also takes IPv4. A ``host`` that is not an IP
    literal (``localhost``) is covered by any loopback or wildcard address.
    """
    bound_ip = parse_address(bound)
    if bound_ip is None:
        return False
    host_ip = parse_address(host)
    if host_ip is None:
        return host.strip().lower() == "localhost" and (
            bound_ip.is_loopback or bound_ip.is_unspecified
        )
    if bound_ip == host_ip:
        return True
    if not bound_ip.is_unspecified:
        return False
    return bound_ip.version == host_ip.version or bound_ip.version == 6


def owner_pid(listeners: Iterable[Listener], host: str, port: int) -> int | None:
    """The pid of the process that answers connections to ``host:port``, or None.

    Among the listeners on ``port`` that `covers` ``host``, an exact address binding wins
    over a wildcard (the kernel routes the connection to it), then the lowest pid: is the
    socket on our port ours?
    """
    matching = [item for item in listeners if item.port == port and covers(item.address, host)]
    if not matching:
        return None
    best = min(matching, key=lambda item: (is_wildcard(item.address), item.pid))
    return best.pid
