"""A fake `Fleet` for the control API's tests: instances, log lines and events held in
memory, every command recorded, every follow subscription counted while it is open."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TypeVar

import attrs
import h11
import trio

from inferactors._edges.log_ring import LogLine
from inferactors._errors import InvalidConfig, InvalidState, UnknownInstance, Unsupported
from inferactors._events import Event, ProcessExited
from inferactors._policy.readiness import reason as why_not_ready
from inferactors._policy.readiness import serves
from inferactors._policy.service_status import DisplayState, display_state
from inferactors._service.views import InstanceView, ReadyView, ReloadResult
from inferactors._status import InstanceState, InstanceStatus
from inferactors._stop_reasons import StopReason

Item = TypeVar("Item")


def running(name: str, pid: int) -> InstanceView:
    status = InstanceStatus(InstanceState.RUNNING, pid=pid, uptime_s=12.5, serving=True)
    return InstanceView(
        name,
        "infer.llamacpp",
        "managed",
        f"id-{name}",
        status,
        endpoint=f"http://127.0.0.1:{8000 + pid}",
        model="tiny",
    )


def shown(status: InstanceStatus) -> DisplayState:
    """The display state of a managed instance with ``status``."""
    return display_state(status)


@attrs.define(eq=False)
class FakeFleet:
    """Two running instances, ``chat`` and ``embed``, unless told otherwise."""

    instances: dict[str, InstanceView] = attrs.Factory(
        lambda: {"chat": running("chat", 101), "embed": running("embed", 102)}
    )
    lines: dict[str, list[LogLine]] = attrs.Factory(dict)
    events: list[Event] = attrs.Factory(list)
    calls: list[str] = attrs.Factory(list)
    waits: list[float] = attrs.Factory(list)
    """The ``wait_s`` of each start and restart, in order."""
    start_status: InstanceStatus | None = None
    """What a start or restart ends in (None: running)."""
    is_alive: bool = True
    alive_delay_s: float = 0.0
    reload_error: InvalidConfig | None = None
    reload_result: ReloadResult = attrs.Factory(
        lambda: ReloadResult(added=("new",), changed=("chat",), unchanged=("embed",))
    )
    open_follows: int = 0
    optional: set[str] = attrs.Factory(set)
    _log_followers: dict[str, list[trio.MemorySendChannel[LogLine]]] = attrs.Factory(dict)
    _event_followers: list[trio.MemorySendChannel[Event]] = attrs.Factory(list)

    def views(self) -> tuple[InstanceView, ...]:
        return tuple(self.instances.values())

    def view(self, name: str) -> InstanceView:
        if name not in self.instances:
            raise UnknownInstance(f"no instance named {name!r}")
        return self.instances[name]

    async def start(self, name: str, wait_s: float = 0.0) -> InstanceView:
        self.waits.append(wait_s)
        return self._act("start", name, InstanceState.RUNNING)

    async def stop(self, name: str) -> InstanceView:
        return self._act("stop", name, InstanceState.EXITED)

    async def restart(self, name: str, wait_s: float = 0.0) -> InstanceView:
        self.waits.append(wait_s)
        return self._act("restart", name, InstanceState.RUNNING)

    def _act(self, what: str, name: str, state: InstanceState) -> InstanceView:
        view = self.view(name)
        if what == "start" and view.status.state is InstanceState.RUNNING:
            raise InvalidState(f"{name} is already running")
        self.calls.append(f"{what} {name}")
        reason = "requested" if state is InstanceState.EXITED else None
        status = InstanceStatus(state, stop_reason=reason)
        if what == "stop" and view.status.state is InstanceState.EXITED:
            status = view.status  # nothing runs: left as it is
        if what != "stop" and self.start_status is not None:
            status = self.start_status
        self.instances[name] = attrs.evolve(view, status=status, display_state=shown(status))
        return self.instances[name]

    async def reload(self) -> ReloadResult:
        self.calls.append("reload")
        if self.reload_error is not None:
            raise self.reload_error
        return self.reload_result

    def log_tail(self, name: str, lines: int) -> tuple[LogLine, ...]:
        if self.view(name).mode == "adopted":  # as `Fleet.log_tail`
            raise Unsupported(f"{name} is adopted: inferactors never reads its output")
        kept = self.lines.get(name, [])
        return tuple(kept[-lines:]) if lines else ()

    @contextlib.contextmanager
    def follow_logs(self, name: str) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
        send, receive = trio.open_memory_channel[LogLine](100)
        followers = self._log_followers.setdefault(name, [])
        with self._counted(send, followers):
            yield receive

    def recent_events(self, n: int) -> tuple[Event, ...]:
        return tuple(self.events[-n:]) if n else ()

    def name_of(self, instance_id: str) -> str | None:
        return next((v.name for v in self.instances.values() if v.instance_id == instance_id), None)

    @contextlib.contextmanager
    def follow_events(self) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        send, receive = trio.open_memory_channel[Event](100)
        with self._counted(send, self._event_followers):
            yield receive

    @contextlib.contextmanager
    def _counted(
        self, send: trio.MemorySendChannel[Item], into: list[trio.MemorySendChannel[Item]]
    ) -> Iterator[None]:
        into.append(send)
        self.open_follows += 1
        try:
            yield
        finally:
            into.remove(send)
            self.open_follows -= 1
            send.close()

    def add_line(self, name: str, text: str, stream: str = "stderr") -> None:
        line = LogLine(1_700_000_000.5, stream, 101, text)
        self.lines.setdefault(name, []).append(line)
        for send in self._log_followers.get(name, []):
            send.send_nowait(line)

    def end_follows(self) -> None:
        """End every follow stream, as `Fleet.close` does (what was sent stays queued)."""
        for lines in self._log_followers.values():
            for send_line in lines:
                send_line.close()
        for send_event in self._event_followers:
            send_event.close()

    def add_event(self, event: Event) -> None:
        self.events.append(event)
        for send in self._event_followers:
            send.send_nowait(event)

    async def alive(self, deadline_s: float) -> bool:
        await trio.sleep(self.alive_delay_s)
        return self.is_alive

    def readiness(self) -> tuple[ReadyView, ...]:
        return tuple(
            ReadyView(
                name,
                serves(view.status),
                name not in self.optional,
                view.status.state.value,
                None if serves(view.status) else why_not_ready(view.status),
            )
            for name, view in self.instances.items()
        )

    async def refresh_metrics(self) -> None:
        self.calls.append("refresh metrics")

    def metrics_text(self) -> bytes:
        return b"# TYPE inferactors_up gauge\ninferactors_up 1.0\n"


def crash(name: str = "chat", at: float = 5.0) -> ProcessExited:
    """The exit of a crashed server, with its last lines."""
    return ProcessExited(
        f"id-{name}", 101, 1, None, StopReason.CRASH, at, last_lines=("boom", "bye")
    )


@attrs.define(eq=False)
class NdjsonStream:
    """A follow request's reply read with h11 on a plain trio stream (httpx's nested line
    generators are left unclosed when a test stops reading mid-stream)."""

    stream: trio.SocketStream
    connection: h11.Connection = attrs.Factory(lambda: h11.Connection(h11.CLIENT))
    status: int = 0
    buffer: bytes = b""

    async def _event(self) -> object:
        while True:
            event = self.connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.connection.receive_data(await self.stream.receive_some(65536))

    async def next_json(self) -> dict[str, object] | None:
        """The next NDJSON item, or None once the reply ended."""
        while b"\n" not in self.buffer:
            event = await self._event()
            if isinstance(event, h11.Data):
                self.buffer += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        item: dict[str, object] = json.loads(line)
        return item


@contextlib.asynccontextmanager
async def follow(socket_path: Path, target: str) -> AsyncIterator[NdjsonStream]:
    """GET ``target`` on the control socket; the connection closes when the block ends."""
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream:
        reader = NdjsonStream(stream)
        request = h11.Request(method="GET", target=target, headers=[("host", "control")])
        await stream.send_all(reader.connection.send(request) or b"")
        await stream.send_all(reader.connection.send(h11.EndOfMessage()) or b"")
        response = await reader._event()
        assert isinstance(response, h11.Response)
        reader.status = response.status_code
        yield reader
