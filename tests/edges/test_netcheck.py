"""Tests of `port_in_use` (``_edges/netcheck.py``) on real loopback sockets: true for a port
with a listener, false for one that was bound once and released.
"""

from __future__ import annotations

import trio

from edges.probe_support import closed_port
from inferactors._edges.netcheck import port_in_use


async def test_port_in_use_true_for_a_real_listener() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    try:
        port = listeners[0].socket.getsockname()[1]
        assert await port_in_use("127.0.0.1", port)
    finally:
        await trio.aclose_forcefully(listeners[0])


async def test_port_in_use_false_for_a_closed_port() -> None:
    assert not await port_in_use("127.0.0.1", closed_port())
