"""Listeners that close while their holders are being looked up (a host whose 1,000
listeners close at once): the lookups answer, never raise. A `KeyError` here once crashed
the exposure watch of every managed server scanning at that moment, and their healthy
servers were stopped."""

from __future__ import annotations

import pytest
import trio

from inferactors._edges import socket_table
from inferactors._edges.socket_table import SocketEntry, SocketTable

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
