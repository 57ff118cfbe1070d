"""The web page's tests without a browser: `PageFleet` (the control API's fake fleet with
what the page reads: a history and a change signal) and `sse` (a server-sent events reply
read with h11 off the control socket)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import h11
import trio

from inferactors._events import Event, instance_of
from inferactors._service.ui_history import UiHistory
from inferactors._service.views import InstanceView
from service.control_support import FakeFleet, NdjsonStream

WALL_0 = 1_800_000_000.0
"""The page fleet's wall clock at trio time 0."""


@attrs.define(eq=False)
class PageFleet(FakeFleet):
    """`FakeFleet` as the page reads it: each event goes into its history, as `Fleet`
    does, `changed` counts a change and wakes `until_changed`, and a live server's uptime
    moves with trio's clock, as a real one's does."""

    history: UiHistory = attrs.Factory(
        lambda: UiHistory(wall=lambda: WALL_0 + trio.current_time(), monotonic=trio.current_time)
    )
    changes: int = 0
    _changed: trio.Event = attrs.Factory(trio.Event)

    def views(self) -> tuple[InstanceView, ...]:
        return tuple(_moving(view) for view in super().views())

    def view(self, name: str) -> InstanceView:
        return _moving(super().view(name))

    async def until_changed(self) -> None:
        await self._changed.wait()

    def changed(self) -> None:
        self.changes += 1
        self._changed.set()
        self._changed = trio.Event()

    def add_event(self, event: Event) -> None:
        names = {view.instance_id: view.name for view in self.views()}
        name = names.get(instance_of(event))
        if name is not None:
            self.history.on_event(name, event)
        super().add_event(event)


def _moving(view: InstanceView) -> InstanceView:
    """``view`` with its uptime counted on from trio's clock (the base as given)."""
    uptime = view.status.uptime_s
    if uptime is None:
        return view
    return attrs.evolve(
        view, status=attrs.evolve(view.status, uptime_s=uptime + trio.current_time())
    )


@attrs.define(eq=False)
class SseStream(NdjsonStream):
    """A reply of server-sent events, one event at a time."""

    headers: dict[bytes, bytes] = attrs.Factory(dict)

    async def next_event(self) -> tuple[str, Any] | None:
        """The next ``(event name, data)``, or None once the reply ended."""
        while b"\n\n" not in self.buffer:
            event = await self._event()
            if isinstance(event, h11.Data):
                self.buffer += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return None
        block, self.buffer = self.buffer.split(b"\n\n", 1)
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n"))
        return fields[b"event"].decode(), json.loads(fields[b"data"])

    async def next_named(self, name: str) -> Any:
        """The data of the next event called ``name`` (others are skipped)."""
        while (item := await self.next_event()) is not None:
            if item[0] == name:
                return item[1]
        raise AssertionError(f"the stream ended before a {name!r} event")


@contextlib.asynccontextmanager
async def sse(socket_path: Path, target: str) -> AsyncIterator[SseStream]:
    """GET ``target`` on the control socket; the connection closes when the block ends."""
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream:
        reader = SseStream(stream)
        request = h11.Request(method="GET", target=target, headers=[("host", "control")])
        await stream.send_all(reader.connection.send(request) or b"")
        await stream.send_all(reader.connection.send(h11.EndOfMessage()) or b"")
        response = await reader._event()
        assert isinstance(response, h11.Response)
        reader.status = response.status_code
        reader.headers = dict(response.headers)
        yield reader
