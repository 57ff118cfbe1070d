"""What the crash-isolation tests share: a JSON server on a real socket, nesting bombs, a
prober with a bug injected through the edges, and an event recorder.

`JsonServer` answers HTTP/1.1 on loopback (trio and h11) with one fixed reply per path, as a
llama-server would on ``/health``, ``/v1/models`` and ``/v1/chat/completions``; `bomb` is a
deeply nested JSON document, far past the recursion limit of Python's ``json`` and well
under the 1 MiB body cap. `BugSwitch` wraps the real HTTP prober so that the reports of a
chosen port raise a chosen exception (a bug in a worker, reached through ``Edges``).
`Recorder` keeps every event of a subscription and waits for the one a test needs.
`BOMB_HELPER` is ``tests/helpers/bomb_server.py``, the managed server that sends bombs.
"""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import h11
import trio

from inferactors import (
    CompletionResult,
    Event,
    InferFlavor,
    InstanceCrashed,
    Prober,
    ServerReport,
    http_prober_factory,
)
from inferactors._edges.probe import ProberFactory
from support import Unprivileged

BOMB_HELPER = Path(__file__).parents[1] / "helpers" / "bomb_server.py"
WAIT_S = 30.0

Reply = tuple[int, bytes]


def bomb(depth: int = 100_000) -> bytes:
    """``[[[...]]]`` ``depth`` deep: 200 KB at the default depth."""
    return b"[" * depth + b"]" * depth


def llama_replies(model: str) -> dict[str, Reply]:
    """A healthy llama-server's replies for ``model``."""
    listed = {"object": "list", "data": [{"id": model}]}
    message = {"role": "assistant", "content": " x"}
    completion = {"choices": [{"message": message, "finish_reason": "length"}]}
    return {
        "/health": (200, b'{"status": "ok"}'),
        "/v1/models": (200, json.dumps(listed).encode()),
        "/v1/chat/completions": (200, json.dumps(completion).encode()),
    }


def bombing(model: str, path: str) -> dict[str, Reply]:
    """`llama_replies` with a bomb on ``path`` (``/health`` answers it with 503, the status
    whose body a probe reads)."""
    replies = llama_replies(model)
    replies[path] = (503 if path == "/health" else 200, bomb())
    return replies


def another_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def server_program(unprivileged: Unprivileged, directory: Path, helper: Path) -> Path:
    """An executable in ``directory`` that runs ``helper`` with an interpreter the
    unprivileged account can use (as the ``lab`` fixture's program does)."""
    program = directory / "bomb-bin" / helper.stem
    program.parent.mkdir(mode=0o755)
    python, script = shlex.quote(unprivileged.python), shlex.quote(str(helper))
    program.write_text(f'#!/bin/sh\nexec {python} -I {script} "$@"\n')
    program.chmod(0o755)
    return program


@attrs.define(eq=False)
class JsonServer:
    """One HTTP server on 127.0.0.1:`port`; ``replies`` maps a path to (status, body), other
    paths get 404; ``seen`` lists ``"METHOD PATH"`` of every request. Start with `open`."""

    port: int
    replies: dict[str, Reply]
    seen: list[str] = attrs.Factory(list)

    @classmethod
    async def open(cls, nursery: trio.Nursery, replies: Mapping[str, Reply]) -> JsonServer:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        server = cls(listeners[0].socket.getsockname()[1], dict(replies))
        nursery.start_soon(trio.serve_listeners, server._serve, listeners)
        return server

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            async with stream:
                request = await _read_request(connection, stream)
                if request is not None:
                    await self._answer(connection, stream, request)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client went away (a capped read, a timeout): nothing to answer

    async def _answer(
        self, connection: h11.Connection, stream: trio.SocketStream, request: h11.Request
    ) -> None:
        path = request.target.decode()
        self.seen.append(f"{request.method.decode()} {path}")
        status, body = self.replies.get(path, (404, b'{"error": "not found"}'))
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]
        for event in (h11.Response(status_code=status, headers=headers), h11.Data(data=body)):
            data = connection.send(event)
            assert data is not None
            await stream.send_all(data)
        await stream.send_all(connection.send(h11.EndOfMessage()) or b"")


async def _read_request(
    connection: h11.Connection, stream: trio.SocketStream
) -> h11.Request | None:
    request: h11.Request | None = None
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None


# A bug injected through the edges.


@attrs.define(eq=False)
class BugSwitch:
    """Makes the probe reports of chosen ports raise; `factory` is the HTTP edge to give a
    runtime (``Edges(open_prober=...)`` or ``open_runtime(open_prober=...)``).

    ``raised`` lists the ports whose report raised, in order.
    """

    _armed: dict[int, tuple[Callable[[], Exception], int]] = attrs.Factory(dict)
    raised: list[int] = attrs.Factory(list)

    def arm(self, port: int, error: Callable[[], Exception], times: int = 1) -> None:
        """The next ``times`` reports of ``port`` raise ``error()``."""
        self._armed[port] = (error, times)

    def factory(self, inner: ProberFactory | None = None) -> ProberFactory:
        real = inner or http_prober_factory()

        def open_prober(base_url: str, timeout_s: float) -> Prober:
            port = int(base_url.rsplit(":", 1)[1])
            return _BuggyProber(self, real(base_url, timeout_s), port)

        return open_prober

    def fire(self, port: int) -> None:
        armed = self._armed.get(port)
        if armed is None:
            return
        error, times = armed
        if times <= 1:
            del self._armed[port]
        else:
            self._armed[port] = (error, times - 1)
        self.raised.append(port)
        raise error()


@attrs.define(eq=False)
class _BuggyProber:
    switch: BugSwitch
    inner: Prober
    port: int

    async def report(self, flavor: InferFlavor) -> ServerReport:
        await trio.lowlevel.checkpoint()
        self.switch.fire(self.port)
        return await self.inner.report(flavor)

    async def tiny_completion(self, model: str | None) -> CompletionResult:
        return await self.inner.tiny_completion(model)

    async def props(self) -> Mapping[str, object] | None:
        return await self.inner.props()

    async def aclose(self) -> None:
        await self.inner.aclose()


# Events.


@attrs.define(eq=False)
class Recorder:
    """Every event of one subscription, in order, and a way to wait for one."""

    events: trio.MemoryReceiveChannel[Event]
    seen: list[Event] = attrs.Factory(list)

    async def until(self, match: Callable[[Event], bool], timeout_s: float = WAIT_S) -> Event:
        """The first event so far (or from now on) that ``match`` accepts."""
        for event in self.seen:
            if match(event):
                return event
        with trio.fail_after(timeout_s):
            async for event in self.events:
                self.seen.append(event)
                if match(event):
                    return event
        raise AssertionError(f"the event stream ended; seen: {self.seen}")

    def take(self) -> list[Event]:
        """Every event so far, reading what is queued first."""
        while True:
            try:
                self.seen.append(self.events.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return list(self.seen)

    def of(self, instance_id: str) -> list[Event]:
        return [event for event in self.take() if event.instance_id == instance_id]

    async def crash_of(self, instance_id: str) -> InstanceCrashed:
        def crashed(event: Event) -> bool:
            return isinstance(event, InstanceCrashed) and event.instance_id == instance_id

        found = await self.until(crashed)
        assert isinstance(found, InstanceCrashed)
        return found
