"""What the crash-isolation tests share: a llama-server's replies (with or without a
nesting bomb), a prober with a bug injected through the edges, and an event recorder.

`llama_replies` are the fixed replies of ``/health``, ``/v1/models`` and
``/v1/chat/completions`` for the loopback server of ``edges.hostile_server_support``;
`bombing` puts its `nesting_bomb` on one path: a deeply nested JSON document, far past the
recursion limit of Python's ``json`` and well under the 1 MiB body cap. `BugSwitch` wraps
the real HTTP prober so that the reports of a chosen port raise a chosen exception (a bug
in a worker, reached through ``Edges``).
`Recorder` keeps every event of a subscription and waits for the one a test needs.
`BOMB_HELPER` is ``tests/helpers/bomb_server.py``, the managed server that sends bombs
(run it with ``managed_support.server_program``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import trio

from edges.hostile_server_support import Reply, nesting_bomb
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
from inferactors._events import instance_of

BOMB_HELPER = Path(__file__).parents[1] / "helpers" / "bomb_server.py"
WAIT_S = 30.0


def llama_replies(model: str) -> dict[str, Reply]:
    """A healthy llama-server's replies for ``model``."""
    listed = {"object": "list", "data": [{"id": model}]}
    message = {"role": "assistant", "content": " x"}
    completion = {"choices": [{"message": message, "finish_reason": "length"}]}
    return {
        "/health": json_reply(b'{"status": "ok"}'),
        "/v1/models": json_reply(json.dumps(listed).encode()),
        "/v1/chat/completions": json_reply(json.dumps(completion).encode()),
    }


def json_reply(body: bytes, status: int = 200) -> Reply:
    """``body`` as a JSON reply on a connection that closes after it."""
    return Reply(status, (("content-type", "application/json"), ("connection", "close")), body)


def bombing(model: str, path: str) -> dict[str, Reply]:
    """`llama_replies` with a bomb on ``path`` (``/health`` answers it with 503, the status
    whose body a probe reads)."""
    replies = llama_replies(model)
    replies[path] = json_reply(nesting_bomb(), 503 if path == "/health" else 200)
    return replies


def another_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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

        def open_prober(
            base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
        ) -> Prober:
            port = int(base_url.rsplit(":", 1)[1])
            return _BuggyProber(self, real(base_url, timeout_s, headers=headers), port)

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

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport:
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
        return [event for event in self.take() if instance_of(event) == instance_id]

    async def crash_of(self, instance_id: str) -> InstanceCrashed:
        def crashed(event: Event) -> bool:
            return isinstance(event, InstanceCrashed) and event.instance_id == instance_id

        found = await self.until(crashed)
        assert isinstance(found, InstanceCrashed)
        return found
