"""Tests of `port_in_use` (``_edges/netcheck.py``), issue 8 item 6: a port is free only if
a server could bind it on the address it will use, on real loopback sockets.

A connect test, the check before issue 8, says "free" for a socket that is bound but not
listening (the server's own bind then fails), and "in use" for a loopback connect that times
out; the bind answers both right, at once and without a packet.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest
import trio

from edges.probe_support import closed_port
from inferactors._edges.netcheck import accepts_connections, port_in_use


@contextmanager
def bound(
    host: str, port: int = 0, *, listen: int | None = None, reuse: bool = False
) -> Iterator[socket.socket]:
    """A TCP socket bound to ``host:port``, listening when asked; ``SO_REUSEADDR`` only
    when ``reuse`` (a real server sets it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        if listen is not None:
            sock.listen(listen)
        yield sock


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


async def test_a_socket_bound_but_not_listening_is_in_use_though_nothing_answers() -> None:
    with bound("127.0.0.1") as sock:
        port = port_of(sock)
        assert not await accepts_connections("127.0.0.1", port), "a connect is refused here"
        assert await port_in_use("127.0.0.1", port)


async def test_a_listener_with_a_full_accept_queue_is_in_use_at_once() -> None:
    with bound("127.0.0.1", listen=0) as server:
        port = port_of(server)
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # fills the queue
            started = trio.current_time()
            assert await port_in_use("127.0.0.1", port)
            assert trio.current_time() - started < 0.15, "a bind never waits (a connect: 0.3 s)"


async def test_a_free_port_is_free_and_the_check_leaves_nothing_bound() -> None:
    port = closed_port()
    assert not await port_in_use("127.0.0.1", port)
    assert not await port_in_use("127.0.0.1", port), "the first check let its socket go"
    with bound("127.0.0.1", port):
        pass  # and a server can still bind it


async def test_a_listener_on_another_loopback_address_leaves_ours_free() -> None:
    with bound("127.0.0.2", listen=8) as sock:
        assert not await port_in_use("127.0.0.1", port_of(sock))


async def test_a_wildcard_listener_takes_every_ipv4_address() -> None:
    with bound("0.0.0.0", listen=8) as sock:
        assert await port_in_use("127.0.0.1", port_of(sock))
        assert await port_in_use("127.0.0.3", port_of(sock))


async def test_an_ipv6_only_listener_takes_its_port_for_a_server_on_ipv6_loopback() -> None:
    with bound("::1", listen=8) as sock:
        port = port_of(sock)
        assert await port_in_use("::1", port)
        assert not await port_in_use("127.0.0.1", port), "::1 alone does not take 127.0.0.1"


@pytest.mark.parametrize("host", ["::1", "localhost"])
async def test_ipv6_loopback_and_localhost_need_both_loopback_families_free(host: str) -> None:
    """A client that says "localhost" reaches 127.0.0.1 or ::1: a foreign listener on either
    family would take our traffic, so both must be free."""
    with bound("127.0.0.1", listen=8) as v4:
        assert await port_in_use(host, port_of(v4))
    with bound("::1", listen=8) as v6:
        assert await port_in_use(host, port_of(v6))
    assert not await port_in_use(host, closed_port())


async def test_a_port_in_time_wait_is_free_as_a_reusing_server_finds_it() -> None:
    """After a server closed an accepted connection first, its side waits in TIME_WAIT;
    llama-server and mlx_lm.server set SO_REUSEADDR and bind again, and so does the check."""
    with bound("127.0.0.1", listen=8, reuse=True) as server:
        port = port_of(server)
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    assert await trio.to_thread.run_sync(in_time_wait, port)
    assert not await port_in_use("127.0.0.1", port)


def in_time_wait(port: int) -> bool:
    connections = psutil.net_connections(kind="tcp4")
    return any(
        getattr(c.laddr, "port", None) == port and c.status == psutil.CONN_TIME_WAIT
        for c in connections
    )
