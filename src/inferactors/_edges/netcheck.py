"""Is a TCP port taken? A bind, as the server would do it; and a bare connect, never HTTP.

`port_in_use` is the occupied-port check before a launch (a foreign
socket on our port must be found before launch). It binds, because only a bind answers the
question the server will ask: a connect misses a socket that is bound but not listening
(the server's own bind then fails), and a connect that times out on loopback says nothing
at all. The footprint of a host (both loopback families for ``localhost`` and ``::1``) is
`_config.binding.bind_footprint`, the rule the run file's validation uses too.

`connect_reach` is the exposure check's TCP connect (bounded by 300 ms): it asks whether a
listener answers on an address, which only a connect can tell. Its silence is read by the
lateness rule (``_policy/lateness.py`` `connect_reach`): never "reachable"; no verdict on
loopback or when our own loop ran late (``loop_lag``), so the caller checks again soon.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import trio

from .._config.binding import bind_footprint, is_loopback_name
from .._config.spec import IPAddress
from .._policy import lateness as lateness_rule
from .._policy.lateness import ConnectResult, Reach, gives_no_verdict
from .loop_lag import lateness, loop_lag


async def port_in_use(host: str, port: int) -> bool:
    """Whether a server told to bind ``host:port`` would find the port taken.

    Binds a fresh TCP socket to every address of ``host``'s footprint (``localhost`` and
    ``::1``: 127.0.0.1 and ::1) with ``SO_REUSEADDR`` set, as llama-server and
    mlx_lm.server set it, and closes it at once: no listen, no packet. True when any of
    those binds fails with ``EADDRINUSE``: a listener, a wildcard listener covering the
    address, or a socket bound without ``SO_REUSEADDR``, listening or not. Any other
    failure is not "in use": an address this host does not have (``EADDRNOTAVAIL``, no
    IPv6) has no listener, and a port we may not bind (``EACCES``) is the spawn's to
    report. Takes microseconds; never waits.

    Raises:
        ValueError: ``host`` is neither ``localhost`` nor an IP address.
    """
    await trio.lowlevel.checkpoint()
    return any(_bind_fails(ip, port) for ip in bind_footprint(host))


def _bind_fails(ip: IPAddress, port: int) -> bool:
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return False  # this host has no such family: nothing can listen there
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # "::" takes both families, as a dual-stack server does; "::1" only itself.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(not ip.is_unspecified))
        try:
            sock.bind((str(ip), port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


async def connect_reach(host: str, port: int, *, timeout_s: float = 0.3) -> Reach:
    """What a TCP connect to ``host:port`` says about it (the exposure connect).

    Opens a TCP connection within ``timeout_s`` (float seconds, default 0.3) and closes it
    at once without sending a byte. `Reach.REACHABLE` only if the connect succeeds (a fact,
    however late our loop ran); a refusal or any other OSError is `Reach.NOT_REACHABLE`.
    No answer in time is never reachable: on loopback (nothing is lost in transit there, so
    silence is a full accept queue or a filter, not an answer) or when our own loop ate
    the budget it is `Reach.NO_VERDICT` (the latter noted as a sign of overload), elsewhere
    `Reach.NOT_REACHABLE`.
    """
    started = trio.current_time()
    with trio.move_on_at(started + timeout_s):
        try:
            await _connect_once(host, port)
        except OSError:
            return Reach.NOT_REACHABLE
        return Reach.REACHABLE
    late = lateness(started, started + timeout_s)
    if gives_no_verdict(late):
        loop_lag().lost_verdict(lateness_rule.no_verdict_why(f"connect {host}:{port}", late))
    return lateness_rule.connect_reach(ConnectResult.SILENT, late, loopback=is_loopback_name(host))


async def _connect_once(host: str, port: int) -> None:
    """One TCP connect to ``host:port`` on a bare trio socket, closed at once without a byte
    sent (a name is looked up first). Raises `OSError` when refused."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        stream = await trio.open_tcp_stream(host, port)
        await trio.aclose_forcefully(stream)
        return
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with trio.socket.socket(family, socket.SOCK_STREAM) as sock:
        await sock.connect((host, port))


async def accepts_connections(host: str, port: int, *, timeout_s: float = 0.3) -> bool:
    """Whether `connect_reach` finds ``host:port`` reachable (silence never is)."""
    return await connect_reach(host, port, timeout_s=timeout_s) is Reach.REACHABLE
