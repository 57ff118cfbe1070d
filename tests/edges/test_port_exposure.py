"""An adopted server's exposure from its own port only (issue 11: a thousand adopted servers
cost one per-port kernel query each, never a walk of the whole table or of a process tree).

Real listening processes on loopback and on the wildcard; the connect check's targets are
``INFERACTORS_LAN_ADDRESSES`` (the test suite points them at ``127.0.0.2``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack

import pytest
import trio
import trio.testing

from edges.socket_table_support import listener_process
from inferactors._edges import socket_table
from inferactors._edges.netscan import ConnectSchedule, SystemNetScanner
from inferactors._edges.socket_table import NetlinkReader, SocketEntry, SocketTable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink: Linux")


class PortsAsked:
    """The netlink reader, remembering which port each dump asked for (None: all)."""

    def __init__(self) -> None:
        self.inner = NetlinkReader()
        self.ports: list[int | None] = []

    def __call__(self, port: int | None) -> Sequence[SocketEntry]:
        self.ports.append(port)
        return self.inner(port)


def _scanner(reader: PortsAsked) -> SystemNetScanner:
    return SystemNetScanner(table=SocketTable(read=reader), connects=ConnectSchedule())


async def test_a_wildcard_listener_is_exposed_with_its_pid_from_one_port_query() -> None:
    reader = PortsAsked()
    net = _scanner(reader)
    with listener_process("0.0.0.0") as server:
        found = await net.port_exposure(server.port)
    assert found is not None
    assert [(item.address, item.port, item.pid) for item in found.listeners] == [
        ("0.0.0.0", server.port, server.pid)
    ]
    assert reader.ports == [server.port]  # never the whole table


async def test_a_loopback_listener_is_not_exposed_and_costs_no_whole_dump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERACTORS_LAN_ADDRESSES", "127.0.0.2")
    reader = PortsAsked()
    net = _scanner(reader)
    with listener_process("127.0.0.1") as server:
        assert await net.port_exposure(server.port) is None
        assert await net.port_exposure(server.port) is None
    assert None not in reader.ports
    assert set(reader.ports) == {server.port}


async def test_a_port_reachable_on_a_lan_address_is_exposed_by_the_connect_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERACTORS_LAN_ADDRESSES", "127.0.0.2")
    net = _scanner(PortsAsked())
    with listener_process("127.0.0.2") as server:  # loopback by address, a LAN one here
        found = await net.port_exposure(server.port)
    assert found is not None
    assert found.reachable_on == ("127.0.0.2",)


@pytest.mark.exclusive  # "quiet" is the whole host: another test's new listener is read
async def test_quiet_servers_scanned_in_one_tick_share_one_dump_and_read_no_process(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setenv("INFERACTORS_LAN_ADDRESSES", "127.0.0.2")
    reads: list[int] = []
    real = socket_table.tree_sockets

    def counted(root: int) -> dict[int, int]:
        reads.append(root)
        return real(root)

    monkeypatch.setattr(socket_table, "tree_sockets", counted)
    reader = PortsAsked()
    net = _scanner(reader)
    with ExitStack() as stack:
        servers = [stack.enter_context(listener_process("127.0.0.1")) for _ in range(3)]
        for server in servers:  # a first sight reads a fresh dump (and the tree, once for
            assert await net.scan(server.pid, server.port) is None  # each foreign listener
        reads.clear()  # beyond loopback the host may have: sshd's, ...)
        for _ in range(5):
            await trio.sleep(0.2)
            reader.ports.clear()
            for server in servers:  # every watch wakes on the same tick
                assert await net.scan(server.pid, server.port) is None
            assert reader.ports == [None]  # one whole dump for the three
    assert reads == []  # quiet: no process was read again


async def test_a_tree_listening_beyond_loopback_on_another_port_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERACTORS_LAN_ADDRESSES", "127.0.0.2")
    net = _scanner(PortsAsked())
    with listener_process("0.0.0.0") as other:
        found = await net.scan(other.pid, other.port + 1)  # we serve on another port
    assert found is not None
    assert [(item.port, item.pid) for item in found.listeners] == [(other.port, other.pid)]


@pytest.mark.exclusive  # the table times its real dumps
async def test_many_ports_asked_at_once_are_answered_by_one_whole_dump(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked: list[int | None] = []

    def read(port: int | None) -> list[SocketEntry]:
        asked.append(port)
        time.sleep(0.002)  # each dump, whole or not, costs about the same here
        ports = range(1000, 1006) if port is None else [port]
        return [SocketEntry("127.0.0.1", each, 50 + each) for each in ports]

    table = SocketTable(read=read)
    await table.listeners(None)  # a whole dump, timed
    await trio.sleep(table.tick_s * 2)
    for port in range(1000, 1006):
        assert [entry.port for entry in await table.listeners(port)] == [port]
    assert asked == [None, 1000, 1001, 1002, None]  # from the 4th port: one dump for all


async def test_holders_of_many_new_listeners_share_one_psutil_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int | None] = []
    real = socket_table.psutil_listeners

    def counted(port: int | None) -> list[SocketEntry]:
        reads.append(port)
        return real(port)

    monkeypatch.setattr(socket_table, "psutil_listeners", counted)
    table = SocketTable()
    with ExitStack() as stack:
        servers = [stack.enter_context(listener_process("0.0.0.0")) for _ in range(4)]
        entries = [(await table.listeners(server.port))[0] for server in servers]
        found: dict[int, int | None] = {}

        async def look(entry: SocketEntry) -> None:
            found[entry.port] = await table.holder(entry)

        async with trio.open_nursery() as nursery:
            for entry in entries:
                nursery.start_soon(look, entry)
    assert found == {server.port: server.pid for server in servers}
    assert reads == [None]  # one whole-table read for the four, not one each


_LATE_BIND = """
import socket, sys
first = socket.socket(); first.bind(("127.0.0.1", 0)); first.listen(8)
print(first.getsockname()[1], flush=True)
sys.stdin.readline()  # then, long after it settled: a second listener beyond loopback
second = socket.socket(); second.bind(("0.0.0.0", 0)); second.listen(8)
print(second.getsockname()[1], flush=True)
sys.stdin.readline()
"""


async def test_a_settled_server_that_later_listens_beyond_loopback_is_found_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERACTORS_LAN_ADDRESSES", "127.0.0.2")
    net = _scanner(PortsAsked())
    args = [sys.executable, "-c", _LATE_BIND]
    pipe = subprocess.PIPE
    with subprocess.Popen(args, stdin=pipe, stdout=pipe) as server:  # noqa: ASYNC220  quick child
        assert server.stdin is not None
        assert server.stdout is not None
        try:
            port = int(server.stdout.readline())
            assert await net.scan(server.pid, port) is None
            await trio.sleep(1.2)
            assert await net.scan(server.pid, port) is None  # settled
            server.stdin.write(b"\n")
            server.stdin.flush()
            other = int(server.stdout.readline())
            await trio.sleep(net.table.tick_s)  # the watch's next tick (200 ms) is later
            found = await net.scan(server.pid, port)
        finally:
            server.kill()
    assert found is not None
    assert [(item.port, item.pid) for item in found.listeners] == [(other, server.pid)]
