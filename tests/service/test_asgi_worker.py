"""`serve_asgi` on a real Unix socket with a reply that never ends: a client that stops
reading is cut once one write waited ``write_s`` while a reading client goes on; at the
end the requests under way get the grace, then a blocked write is cut; ``hurry`` and
cancellation cut at once. (hypercorn's own worker writes inside a shield with no deadline:
there, a client that does not read holds the server for ever.)"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.typing import AppWrapper, ASGIFramework
from hypercorn.utils import wrap_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inferactors._service.asgi_worker import serve_asgi

CHUNK = b"x" * 16384


class Endless:
    """Chunks for ever (an iterator, not a generator: nothing to finalize)."""

    def __aiter__(self) -> Endless:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        return CHUNK


async def endless(request: Request) -> Response:
    return StreamingResponse(Endless())


def app() -> AppWrapper:
    asgi = cast(ASGIFramework, Starlette(routes=[Route("/", endless)]))
    return wrap_app(asgi, 16 << 20, "asgi")


@contextmanager
def listener(path: Path) -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        sock.listen()
        yield sock


def config(grace_s: float) -> Config:
    settings = Config()
    settings.graceful_timeout = grace_s
    settings.accesslog = None
    return settings


@asynccontextmanager
async def ask(path: Path) -> AsyncIterator[trio.SocketStream]:
    stream = await trio.open_unix_socket(str(path))
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    async with stream:
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        yield stream


async def read_to_end(stream: trio.SocketStream) -> int:
    """Read until the connection ends; the bytes read."""
    total = 0
    try:
        while chunk := await stream.receive_some(1 << 16):
            total += len(chunk)
    except trio.BrokenResourceError:
        pass
    return total


async def test_a_client_that_does_not_read_is_cut_and_a_reading_one_goes_on(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = tmp_path / "s.sock"
    ended = trio.Event()
    with listener(path) as sock:
        await nursery.start(
            lambda task_status: serve_asgi(
                app(), config(1.0), [sock], ended.wait, write_s=0.5, task_status=task_status
            )
        )
        async with ask(path) as stalled, ask(path) as reading:
            await stalled_and_reading(stalled, reading)
        ended.set()


async def stalled_and_reading(stalled: trio.SocketStream, reading: trio.SocketStream) -> None:
    got = 0
    with trio.move_on_after(3.0):
        while True:  # the stalled client's write waited 0.5 s long ago
            got += len(await reading.receive_some(1 << 16))
    with trio.fail_after(5.0):
        cut = await read_to_end(stalled)  # what was queued, then the end
    assert got > 10 * len(CHUNK)
    assert cut < got
    with trio.fail_after(2.0):
        assert await reading.receive_some(1 << 16)  # still served


async def test_at_the_end_a_blocked_write_waits_the_grace_then_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    ended = trio.Event()
    with listener(path) as sock:
        async with ask(path) as stalled:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: serve_asgi(
                        app(), config(0.5), [sock], ended.wait, task_status=task_status
                    )
                )
                await trio.sleep(0.5)  # its buffers fill; write_s is 60 s
                began = trio.current_time()
                ended.set()
            took = trio.current_time() - began
            with trio.fail_after(5.0):
                await read_to_end(stalled)
    assert 0.4 < took < 3.0


async def test_hurry_cuts_at_once_and_so_does_cancellation(tmp_path: Path) -> None:
    for way in ("hurry", "cancel"):
        path = tmp_path / f"{way}.sock"
        ended, hurry = trio.Event(), trio.Event()
        with listener(path) as sock:
            async with ask(path) as stalled:
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        lambda task_status, sock=sock, ended=ended, hurry=hurry: serve_asgi(
                            app(),
                            config(30.0),
                            [sock],
                            ended.wait,
                            hurry=hurry.wait,
                            task_status=task_status,
                        )
                    )
                    await trio.sleep(0.5)
                    began = trio.current_time()
                    if way == "hurry":
                        ended.set()
                        hurry.set()
                    else:
                        nursery.cancel_scope.cancel()
                assert trio.current_time() - began < 2.0, way
                with trio.fail_after(5.0):
                    await read_to_end(stalled)
