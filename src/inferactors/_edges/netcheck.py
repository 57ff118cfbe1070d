"""Is a TCP port taken? A bare connect, never HTTP.

Source: seed-behaviour.md checklist item 37 (the occupied-port check uses "a TCP connect
only") and section 3 "Timeouts" (port connects: 300 ms). FC-14: a foreign listener on our port
must be found before launch.
"""

from __future__ import annotations

import ipaddress

import trio


async def port_in_use(host: str, port: int, *, timeout_s: float = 0.3) -> bool:
    """Whether something accepts TCP connections on ``host:port``.

    Opens a TCP connection under ``trio.move_on_after(timeout_s)`` and closes it at once
    without sending a byte. True only if the connect succeeds; a refusal, any other OSError or
    no answer within ``timeout_s`` (float seconds, default 0.3) is False, except on loopback,
    where silence can only be a listener with a full accept queue, so it is True.
    """
    stream: trio.SocketStream | None = None
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return False
    if stream is None:
        # No answer in time. On loopback nothing is lost in transit: a closed port refuses at
        # once, so silence means a listener whose accept queue is full. Elsewhere, say free.
        return _is_loopback(host)
    await trio.aclose_forcefully(stream)
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
