"""Opening a probe connection: the server's address from its base URL, a TCP connect to it,
and the pacing of new connections per trio run (split from ``probe_h11``).

Every new probe connection of a trio run takes a token from one `ConnectPacer`
(`RECONNECTS_PER_S`, burst `RECONNECT_BURST`): after a stall, when every kept connection
has expired together, the probes reconnect spread out rather than as a storm.
"""

from __future__ import annotations

import math
import socket
import urllib.parse
from collections.abc import Awaitable, Callable

import attrs
import trio

RECONNECTS_PER_S = 1000.0
"""New probe connections a trio run opens per second at most, once its burst is spent."""

RECONNECT_BURST = 100.0
"""New probe connections a trio run may open at once."""

Connect = Callable[[], Awaitable[trio.abc.Stream]]
"""Opens a new stream to the server (tests pass in-memory streams)."""


@attrs.define(eq=False)
class ConnectPacer:
    """A token bucket for new connections, shared by every wire of one trio run."""

    rate: float = RECONNECTS_PER_S
    burst: float = RECONNECT_BURST
    _tokens: float = RECONNECT_BURST
    _at: float = -math.inf

    def reserve(self) -> float:
        """Book a token; the seconds to wait before using it (0: at once)."""
        now = trio.current_time()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0.0 else -self._tokens / self.rate

    async def take(self) -> float:
        """Wait for a token; the seconds waited (0 without a wait)."""
        wait = self.reserve()
        if wait <= 0.0:
            await trio.lowlevel.checkpoint()
            return 0.0
        await trio.sleep(wait)
        return wait


_PACER: trio.lowlevel.RunVar[ConnectPacer] = trio.lowlevel.RunVar("inferactors_probe_pacer")


def connect_pacer() -> ConnectPacer:
    """This trio run's `ConnectPacer`."""
    try:
        return _PACER.get()
    except LookupError:
        pacer = ConnectPacer()
        _PACER.set(pacer)
        return pacer


def tcp_connect(host: str, port: int) -> Connect:
    """A `Connect` to ``host:port``: a socket of the address's family connected directly
    when ``host`` is an IP address, else trio's ``open_tcp_stream`` (name lookup)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.inet_pton(family, host)
    except OSError:
        family = socket.AF_UNSPEC  # a name: looked up at each connect

    async def connect() -> trio.abc.Stream:
        if family == socket.AF_UNSPEC:
            return await trio.open_tcp_stream(host, port)
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            await sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)  # sets TCP_NODELAY

    return connect


def split_base_url(base_url: str) -> tuple[str, int, str]:
    """``(host, port, Host header)`` of ``http://host:port`` (a trailing ``/`` allowed; the
    port defaults to 80; an IPv6 host in brackets).

    Raises:
        ValueError: not ``http``, with a path, a query, user info, or no host.
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or parts.path not in ("", "/") or parts.query or parts.username:
        raise ValueError(f"not a plain http://host:port URL: {base_url!r}")
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in {base_url!r}")
    port = parts.port or 80
    return host, port, parts.netloc
