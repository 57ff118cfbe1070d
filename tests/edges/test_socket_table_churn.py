"""Another program's listeners, many and closing. Lookups of their holders while they
close answer and never raise (a `KeyError` here once crashed the exposure watch of every
managed server scanning when 1,000 listeners closed at once, and their healthy servers
were stopped), and 1,000 of them cost one walk up the process tree per server, once (they
took a core when the caches were emptied on every scan); a socket handed into a server's
tree is found within `OUTSIDE_KEPT_S`."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from inferactors._edges import socket_table
from inferactors._edges.socket_table import OUTSIDE_KEPT_S, SocketEntry, SocketTable

ENTRIES = [SocketEntry("0.0.0.0", 20000 + i, 1000 + i) for i in range(300)]


async def test_holders_looked_up_while_their_listeners_close_never_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown = list(ENTRIES)
    table = SocketTable(read=lambda port: [e for e in shown if port in (None, e.port)])
    owners = [SocketEntry(e.address, e.port, 0, 4242) for e in ENTRIES]
    monkeypatch.setattr(socket_table, "psutil_listeners", lambda port: owners)
    await table.listeners(None)
    assert [await table.holder(e) for e in ENTRIES] == [4242] * len(ENTRIES)  # all known
    answers: list[int | None] = []

    async def look_up() -> None:
        for entry in ENTRIES:
            answers.append(await table.holder(entry))

    async def close_them_all() -> None:
        await trio.lowlevel.checkpoint()
        shown.clear()
        await table.listeners(None, fresh=True)  # the dump without them prunes every inode

    async with trio.open_nursery() as nursery:
        nursery.start_soon(look_up)
        nursery.start_soon(close_them_all)
    assert len(answers) == len(ENTRIES)
    assert set(answers) <= {4242, None}


async def test_another_programs_many_listeners_cost_one_walk_per_server_then_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = [SocketEntry("0.0.0.0", 30000 + i, 5000 + i) for i in range(1000)]
    table = SocketTable(read=lambda port: [e for e in entries if port in (None, e.port)])
    owners = [SocketEntry(e.address, e.port, 0, 4242) for e in entries]  # one program's
    monkeypatch.setattr(socket_table, "psutil_listeners", lambda port: owners)
    monkeypatch.setattr(socket_table, "tree_sockets", lambda root: {})  # our trees: quiet
    walks: list[tuple[int, int]] = []

    def descends_from(pid: int, root: int) -> bool:
        walks.append((pid, root))
        return False

    monkeypatch.setattr(socket_table, "descends_from", descends_from)
    servers = range(100, 110)
    await table.listeners(None)
    for _ in range(3):  # three refreshes of ten servers' scans
        for root in servers:
            assert await table.holders_in_tree(root, entries) == {}
        await table.listeners(None, fresh=True)
    assert sorted(walks) == [(4242, root) for root in servers]  # once per server, ever


async def test_a_socket_handed_into_a_tree_is_found_within_the_outside_period(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    entry = SocketEntry("0.0.0.0", 30001, 9001)
    table = SocketTable(read=lambda port: [entry])
    owners = [SocketEntry(entry.address, entry.port, 0, 4242)]  # made by another program
    monkeypatch.setattr(socket_table, "psutil_listeners", lambda port: owners)
    monkeypatch.setattr(socket_table, "descends_from", lambda pid, root: False)
    tree: dict[int, int] = {}
    monkeypatch.setattr(socket_table, "tree_sockets", lambda root: tree)
    assert await table.holders_in_tree(100, [entry]) == {}
    tree[entry.inode] = 777  # passed to the server's child, the giver's copy closed
    await trio.sleep(OUTSIDE_KEPT_S / 2)
    assert await table.holders_in_tree(100, [entry]) == {}  # the answer stands a while
    await trio.sleep(OUTSIDE_KEPT_S / 2)
    assert await table.holders_in_tree(100, [entry]) == {entry: 777}  # then it is looked at


async def test_a_scan_of_brand_new_listeners_makes_no_chain_of_fresh_table_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = [SocketEntry("0.0.0.0", 31000 + i, 7000 + i) for i in range(200)]
    table = SocketTable(read=lambda port: [e for e in entries if port in (None, e.port)])
    reads: list[int | None] = []

    def psutil_listeners(port: int | None) -> list[SocketEntry]:
        reads.append(port)  # a storm: the listeners are newer than any read shows
        return []

    monkeypatch.setattr(socket_table, "psutil_listeners", psutil_listeners)
    monkeypatch.setattr(socket_table, "tree_sockets", lambda root: {})
    assert await table.holders_in_tree(100, entries) == {}
    assert len(reads) == 1  # one shared read, not one fresh read per new listener
    assert await table.holder(entries[0]) is None  # an identity check still reads afresh
    assert len(reads) == 2
