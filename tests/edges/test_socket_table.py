"""The runtime's socket table (issue 11 item 1): the kernel's LISTEN sockets through netlink,
one dump per tick for every caller, pids looked up once per listener, psutil as a fallback.

Real sockets and processes on loopback; MockClock where only the tick matters. Linux only
(netlink sock_diag); the fallback test runs anywhere.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Sequence

import psutil
import pytest
import trio
import trio.testing

from edges.socket_table_support import listener_process, make_time_wait
from inferactors._edges import socket_table
from inferactors._edges.netscan import ConnectSchedule, SystemNetScanner
from inferactors._edges.socket_table import NetlinkReader, SocketEntry, SocketTable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink: Linux")


def _ipv6_loopback_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback_works(), reason="no IPv6 loopback here")


class CountingReader:
    """The netlink reader, counting dumps and the entries the kernel sent back."""

    def __init__(self) -> None:
        self.inner = NetlinkReader()
        self.calls = 0
        self.entries = 0

    def __call__(self, port: int | None) -> Sequence[SocketEntry]:
        self.calls += 1
        found = self.inner(port)
        self.entries += len(found)
        return found


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", pytest.param("::1", marks=needs_ipv6)])
async def test_the_kernel_table_shows_a_bound_socket_with_its_inode_and_owner(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        sock.listen(1)
        port, inode = sock.getsockname()[1], os.fstat(sock.fileno()).st_ino
        table = SocketTable()
        entries = await table.listeners(port)
        assert entries == (SocketEntry(host, port, inode),)
        assert await table.holders_in_tree(os.getpid(), entries) == {entries[0]: os.getpid()}
        assert await table.holder(entries[0]) == os.getpid()
    assert await table.listeners(port, fresh=True) == ()


async def test_another_processs_listener_is_found_and_its_pid_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int | None] = []
    real = socket_table.psutil_listeners

    def counted(port: int | None) -> list[SocketEntry]:
        reads.append(port)
        return real(port)

    monkeypatch.setattr(socket_table, "psutil_listeners", counted)
    scanner = SystemNetScanner()
    with listener_process("127.0.0.1") as other:
        for _ in range(3):
            assert await scanner.port_owner("127.0.0.1", other.port) == other.pid
            scanner.table.refresh_soon()  # a new dump each time: the same inode
        assert reads == [None]  # the whole system table once, for that listener
        listed = await scanner.listeners_on(other.port)
        assert [(item.address, item.pid) for item in listed] == [("127.0.0.1", other.pid)]
    assert reads == [None]


async def test_time_wait_sockets_do_not_reach_the_dump() -> None:
    reader = CountingReader()
    table = SocketTable(read=reader)
    before = len(await table.listeners(None, fresh=True))
    port = make_time_wait(2000)
    # The setup worked: about 2,000 TIME_WAIT sockets to that port are in the system table ...
    waiting = [
        item
        for item in psutil.net_connections(kind="tcp")
        if item.status == psutil.CONN_TIME_WAIT and item.raddr and item.raddr.port == port
    ]
    assert len(waiting) >= 1900
    # ... and the kernel sent none of them: about as many LISTEN sockets as before (other
    # processes on the machine may open or close a few meanwhile).
    after = await table.listeners(None, fresh=True)
    assert len(after) < before + 100
    assert all(entry.port != port for entry in after)
    assert reader.calls == 2


async def test_callers_in_one_tick_share_one_dump(autojump_clock: trio.testing.MockClock) -> None:
    reader = CountingReader()
    table = SocketTable(read=reader)
    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(table.listeners)
    assert reader.calls == 1
    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(table.listeners, 22)  # the whole dump answers a port too
    assert reader.calls == 1
    await trio.sleep(table.tick_s)
    await table.listeners()
    assert reader.calls == 2


async def test_concurrent_callers_wait_on_one_refresh_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = 0

    def slow_psutil(port: int | None) -> list[SocketEntry]:
        nonlocal reads
        reads += 1
        trio.from_thread.run_sync(lambda: None)  # the loop is free meanwhile
        return [SocketEntry("127.0.0.1", 9, 0, 1)]

    def broken(port: int | None) -> Sequence[SocketEntry]:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(socket_table, "psutil_listeners", slow_psutil)
    table = SocketTable(read=broken)
    await table.listeners()  # falls back, once
    table.refresh_soon()
    results: list[tuple[SocketEntry, ...]] = []

    async def ask() -> None:
        results.append(await table.listeners())

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(ask)
    assert reads == 2
    assert results == [(SocketEntry("127.0.0.1", 9, 0, 1),)] * 10


async def test_identity_is_read_once_per_listener_and_again_for_an_impostor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree_reads: list[int] = []
    real = socket_table.tree_sockets

    def counted(root: int) -> dict[int, int]:
        tree_reads.append(root)
        return real(root)

    monkeypatch.setattr(socket_table, "tree_sockets", counted)
    scanner = SystemNetScanner()
    with listener_process("127.0.0.1") as ours:
        for _ in range(5):
            assert await scanner.tree_owner(ours.pid, "127.0.0.1", ours.port) == ours.pid
            scanner.table.refresh_soon()
        assert tree_reads == [ours.pid]  # established once; the same inode needs no read
    with socket.socket() as impostor:  # our server is gone; another takes its port
        impostor.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        impostor.bind(("127.0.0.1", ours.port))
        impostor.listen(1)
        scanner.table.refresh_soon()
        assert await scanner.tree_owner(ours.pid, "127.0.0.1", ours.port) is None
        assert tree_reads == [ours.pid, ours.pid]  # a new inode: read again
        assert await scanner.port_owner("127.0.0.1", ours.port) == os.getpid()


async def test_without_netlink_psutil_answers_and_it_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def broken(port: int | None) -> Sequence[SocketEntry]:
        nonlocal calls
        calls += 1
        raise OSError(93, "Protocol not supported")

    caplog.set_level(logging.DEBUG, logger=socket_table.__name__)
    scanner = SystemNetScanner(table=SocketTable(read=broken))
    with listener_process("127.0.0.1") as other:
        assert await scanner.port_owner("127.0.0.1", other.port) == other.pid
        assert await scanner.tree_owner(other.pid, "127.0.0.1", other.port) == other.pid
        scanner.table.refresh_soon()
        assert await scanner.port_owner("127.0.0.1", other.port) == other.pid
    assert calls == 1  # netlink is not tried again
    fell_back = [r for r in caplog.records if "reading psutil instead" in r.getMessage()]
    assert len(fell_back) == 1


async def test_a_connect_is_due_on_the_first_scan_then_about_every_five_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    schedule = ConnectSchedule(random=lambda: 0.5)
    assert schedule.take(10, 8080)
    assert schedule.take(11, 8080)  # each server has its own schedule
    taken: list[float] = []
    for _ in range(150):  # 30 s of 200 ms ticks
        await trio.sleep(0.2)
        if schedule.take(10, 8080):
            taken.append(trio.current_time())
    gaps = [later - earlier for earlier, later in zip([0.0, *taken], taken, strict=False)]
    assert len(taken) in (5, 6)
    assert all(5.0 - 1e-6 <= gap < 5.2 + 1e-6 for gap in gaps), gaps
