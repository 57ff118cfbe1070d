"""Which addresses a server's bind takes, and when two binds collide (pure).

One rule serves the run file's validation (two instances on one ip:port are refused)
and the occupied-port check before a launch (``_edges/netcheck.py``), so the two can
never disagree:

- ``localhost`` and ``::1`` take both loopback families, ``127.0.0.1`` and ``::1``: a client
  that says "localhost" reaches either (``/etc/hosts`` lists both), so a foreign listener on
  the other family would receive our traffic;
- any other address takes itself;
- ``0.0.0.0`` covers every IPv4 address and ``::`` every address of both families (Linux
  binds ``::`` dual-stack unless ``IPV6_V6ONLY`` is set), so they collide with anything of
  the families they cover.
"""

from __future__ import annotations

import functools
import ipaddress

from .spec import InferenceSpec, IPAddress

LOOPBACK_PAIR: tuple[IPAddress, IPAddress] = (
    ipaddress.IPv4Address("127.0.0.1"),
    ipaddress.IPv6Address("::1"),
)
"""The two addresses ``localhost`` stands for."""


@functools.lru_cache(maxsize=256)
def is_loopback_name(host: str) -> bool:
    """Whether ``host`` (a name or an address literal, no port, no brackets) names this
    machine's loopback: ``localhost`` (in any case), an address of 127.0.0.0/8, ``::1``, or an
    IPv4-mapped ``::ffff:127.x.y.z``. Any other name is not, ``*.localhost`` included: this
    is the one rule for the run file's hosts, the listeners found on the machine and the
    ``Host`` header a browser sends (``_policy/browser_guard.py``). Pure, so answers are
    kept (the last 256 names): the exposure watch asks it of every listener on the host
    five times a second."""
    name = host.strip()
    if name.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def bind_footprint(host: str) -> tuple[IPAddress, ...]:
    """The addresses a server told to bind ``host`` must find free (see the module notes).

    Raises:
        ValueError: ``host`` is neither ``localhost`` nor an IP address.
    """
    if host == "localhost":
        return LOOPBACK_PAIR
    ip = ipaddress.ip_address(host)
    if ip == LOOPBACK_PAIR[1]:
        return LOOPBACK_PAIR
    return (ip,)


def addresses_collide(first: IPAddress, second: IPAddress) -> bool:
    """Whether binds of one port on ``first`` and on ``second`` take the same sockets: the
    same address, or a wildcard covering the other (``::`` covers IPv4 too)."""
    if first == second:
        return True
    for wildcard, other in ((first, second), (second, first)):
        if wildcard.is_unspecified and (wildcard.version == 6 or other.version == 4):
            return True
    return False


def hosts_collide(first: str, second: str) -> bool:
    """Whether servers on ``first`` and ``second`` (one port) would collide.

    Raises:
        ValueError: either is neither ``localhost`` nor an IP address.
    """
    return any(
        addresses_collide(a, b) for a in bind_footprint(first) for b in bind_footprint(second)
    )


def spec_host(spec: InferenceSpec) -> str:
    """The host whose footprint ``spec``'s server takes: ``localhost`` when ``serve.host``
    says so (the server is given 127.0.0.1, but clients of "localhost" reach ::1 too), else
    `InferenceSpec.bind_ip` as text.

    Raises:
        InvalidConfig: as `InferenceSpec.bind_ip`.
    """
    return "localhost" if spec.serve.host == "localhost" else str(spec.bind_ip())
