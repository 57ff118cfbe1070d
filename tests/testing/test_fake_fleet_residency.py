"""What `FakeFleet` plays for front door tests, under MockClock: streams that end, die
midway (no ``[DONE]``, the read fails, the server is gone) or never end; the memory its
servers hold (also after a slow release); a slow exit after SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from inferactors.testing import FakeFleet, FakeStream
from inferactors.testing._fake_fleet import FakeChild

MiB = 1 << 20
PORT = 18900


async def _spawn(fleet: FakeFleet) -> FakeChild:
    edges = fleet.edges()
    argv = ["llama-server", "--port", str(PORT)]
    child = await edges.open_process(argv, cwd=Path("/"), env={}, run_as=None)
    assert isinstance(child, FakeChild)
    return child


async def _stream(chunks: list[bytes], fleet: FakeFleet) -> None:
    async with httpx.AsyncClient(transport=fleet.transport()) as client:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        url = f"http://127.0.0.1:{PORT}/v1/chat/completions"
        async with client.stream("POST", url, json=body) as reply:
            assert reply.headers["content-type"] == "text/event-stream"
            async for chunk in reply.aiter_raw():
                chunks.append(chunk)


async def test_a_stream_ends_with_done(autojump_clock: trio.testing.MockClock) -> None:
    fleet = FakeFleet(stream=FakeStream(chunks=3, chunk_s=0.5))
    await _spawn(fleet)
    chunks: list[bytes] = []
    began = trio.current_time()
    await _stream(chunks, fleet)
    assert trio.current_time() - began == pytest.approx(1.5)
    assert len(chunks) == 4
    assert chunks[-1] == b"data: [DONE]\n\n"


async def test_a_stream_that_dies_midway_fails_the_read_and_ends_the_server(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = FakeFleet(stream=FakeStream(chunks=10, die_after=2))
    child = await _spawn(fleet)
    chunks: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        await _stream(chunks, fleet)
    assert len(chunks) == 2
    assert all(b"[DONE]" not in chunk for chunk in chunks)
    assert not child.alive
    assert child.returncode == -9


async def test_a_stream_that_never_ends_goes_on_until_the_client_leaves(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = FakeFleet(stream=FakeStream(endless=True, chunk_s=1.0))
    await _spawn(fleet)
    chunks: list[bytes] = []
    with trio.move_on_after(3600.0):
        await _stream(chunks, fleet)
    assert len(chunks) >= 3599
    assert all(b"[DONE]" not in chunk for chunk in chunks)


async def test_memory_follows_the_servers_and_a_slow_release(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = FakeFleet(footprint_mib=600, release_s=5.0)
    memory = fleet.memory(total_mib=2048, foreign_mib=100)
    assert (await memory.machine()).available == (2048 - 100) * MiB
    child = await _spawn(fleet)
    assert (await memory.machine()).available == (2048 - 100 - 600) * MiB
    assert await memory.tree_rss(child.pid) == 600 * MiB
    child.crash()
    assert await memory.tree_rss(child.pid) is None
    assert (await memory.machine()).available == (2048 - 100 - 600) * MiB  # not back yet
    await trio.sleep(5.0)
    assert (await memory.machine()).available == (2048 - 100) * MiB
    memory.foreign = 0
    assert (await memory.machine()).available == 2048 * MiB


async def test_a_slow_exit_takes_its_time_after_sigterm_and_none_after_sigkill(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = FakeFleet(exit_s=3.0)
    child = await _spawn(fleet)
    child.signal_group(signal.SIGTERM)
    await trio.sleep(2.9)
    assert child.alive
    await trio.sleep(0.2)
    assert not child.alive
    other = await _spawn(fleet)
    other.signal_group(signal.SIGKILL)
    assert not other.alive
