"""Tests of issue 8 item 6: after our server is gone, nothing we send reaches whoever holds
its port now. The listener's identity is re-checked right before each deep health
(``Probing.ensure_ours``); a managed server that is not running is neither asked for
a token nor probed; an impostor on a live server's port is refused by name, and no
completion request ever reaches it.

The impostor is a raw socket server in the test process that records every request line.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from actors.managed_support import Lab, chat, next_exit, ready
from inferactors import BackendError, InstanceState, open_runtime
from inferactors._policy.probe_report import Unreachable


@asynccontextmanager
async def impostor(port: int) -> AsyncIterator[list[bytes]]:
    """A listener on 127.0.0.1:``port`` that answers 200 to anything and records the first
    line of each request (an empty line for a connection that sent nothing)."""
    seen: list[bytes] = []

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(2):
            while b"\r\n\r\n" not in data and (chunk := await stream.receive_some(65536)):
                data += chunk
        seen.append(data.split(b"\r\n", 1)[0])
        body = b'{"status":"ok","data":[{"id":"tiny.gguf"}],"choices":[]}'
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        try:
            await stream.send_all(head.encode() + body)
        except trio.BrokenResourceError:
            pass
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        try:
            yield seen
        finally:
            nursery.cancel_scope.cancel()


async def test_after_our_server_died_an_impostor_on_its_port_receives_nothing(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        pid = (runtime.status(handle)).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await next_exit(events)
        async with impostor(free_port) as seen:
            with pytest.raises(BackendError) as refused:
                await runtime.deep_health(handle)
            report = await runtime.health(handle)
            status = runtime.status(handle)
            await trio.sleep(0.3)  # anything sent late would arrive by now
    assert str(refused.value) == (
        f"deep health: the server is not running; nothing sent to http://127.0.0.1:{free_port}"
    )
    assert report.health == Unreachable("the server is not running; nothing was sent")
    assert status.state is InstanceState.EXITED
    assert seen == [], "a request reached the impostor"


async def test_an_impostor_on_a_live_servers_port_is_refused_by_name(
    lab: Lab, free_port: int
) -> None:
    """Our server runs but never listens (``silent``); the impostor took the port after the
    start. Deep health names it and sends it nothing: no completion, ever."""
    async with open_runtime(lab.config(behaviour="silent")) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        async with impostor(free_port) as seen:
            with pytest.raises(BackendError) as refused:
                await runtime.deep_health(handle)
            await trio.sleep(0.3)
        status = runtime.status(handle)
    assert str(refused.value) == (
        f"deep health refused: an impostor (process {os.getpid()}) holds "
        f"http://127.0.0.1:{free_port}, not our server (process group {status.pid}); "
        "nothing was sent"
    )
    assert not [line for line in seen if not line.startswith(b"GET ")], seen
