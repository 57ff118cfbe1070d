"""Is a TCP port taken? A bare connect, never HTTP.

Source: seed-behaviour.md checklist item 37 (the occupied-port check uses "a TCP connect
only") and section 3 "Timeouts" (port connects: 300 ms). FC-14: a foreign listener on our port
must be found before launch.
"""

from __future__ import annotations

import trio


async def port_in_use(host: str, port: int, *, timeout_s: float = 0.3) -> bool:
    """Whether something accepts TCP connections on ``host:port``.

    Opens a TCP connection under ``trio.move_on_after(timeout_s)`` and closes it at once
    without sending a byte. True only if the connect succeeds; a refusal, any other OSError or
    no answer within ``timeout_s`` (float seconds, default 0.3) is False.
    """
    stream: trio.SocketStream | None = None
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return False
    if stream is None:
        return False
    await trio.aclose_forcefully(stream)
    return True
