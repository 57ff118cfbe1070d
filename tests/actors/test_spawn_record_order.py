"""The server's record (``server.json``) is written beside the start, not before it (issue
11, profile point 5): `ProcessStarted` and the start's reply do not wait for the record's
write, and the record is removed only after that write, even when the server is gone first.

The record's write is held by a gate (`GatedContainment`, the real containment otherwise),
so "before the write completes" is a fact of the test, not a race.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from actors.managed_support import READY_S, Lab, chat
from inferactors import Event, InstanceState, ProcessExited, ProcessStarted, open_runtime
from inferactors._edges.bundle import Edges, SystemContainment
from inferactors._edges.orphan_record import RECORD_NAME
from inferactors._policy.launch import Launch
from inferactors._policy.privilege import RunAs

E = TypeVar("E", bound=Event)


async def next_of(events: trio.MemoryReceiveChannel[Event], kind: type[E]) -> E:
    """The next event of ``kind`` (earlier ones of other kinds are skipped)."""
    async for event in events:
        if isinstance(event, kind):
            return event
    raise AssertionError(f"the event stream ended before a {kind.__name__}")


@attrs.define(eq=False)
class GatedContainment:
    """The real containment, but `record` waits for ``gate``; calls are logged in order."""

    gate: trio.Event = attrs.Factory(trio.Event)
    entered: trio.Event = attrs.Factory(trio.Event)
    calls: list[str] = attrs.Factory(list)
    real: SystemContainment = attrs.Factory(SystemContainment)

    def euid(self) -> int:
        return self.real.euid()

    async def prepare(self, launch: Launch, run_as: RunAs | None, files: Sequence[Path]) -> None:
        await self.real.prepare(launch, run_as, files)

    async def record(self, launch: Launch, pid: int, port: int) -> None:
        self.entered.set()
        await self.gate.wait()
        await self.real.record(launch, pid, port)
        self.calls.append("record")

    async def refresh(self, launch: Launch, pid: int) -> None:
        await self.real.refresh(launch, pid)

    async def forget(self, launch: Launch, pid: int) -> None:
        await self.real.forget(launch, pid)
        self.calls.append("forget")


async def test_process_started_comes_before_the_record_is_written(lab: Lab, free_port: int) -> None:
    containment = GatedContainment()
    edges = Edges(containment=containment)
    async with open_runtime(lab.config(), node_id="n", edges=edges) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        record = lab.data_root / handle.instance_id / RECORD_NAME
        with trio.fail_after(READY_S):
            await runtime.start(handle)  # answered on the spawn, the record still held
            event = await next_of(events, ProcessStarted)
            await containment.entered.wait()
        assert not record.exists()
        containment.gate.set()
        with trio.fail_after(READY_S):
            while not record.exists():  # noqa: ASYNC110  the write runs in a worker thread
                await trio.sleep(0.01)
        assert f'"pid": {event.pid}' in record.read_text()
        await runtime.stop(handle, 5.0)
        with trio.fail_after(READY_S):
            while containment.calls != ["record", "forget"]:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert not record.exists()


async def test_a_server_gone_before_its_record_is_written_leaves_no_record(
    lab: Lab, free_port: int
) -> None:
    containment = GatedContainment()
    edges = Edges(containment=containment)
    async with open_runtime(lab.config(), node_id="n", edges=edges) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        instance_dir = lab.data_root / handle.instance_id
        with trio.fail_after(READY_S):
            await runtime.start(handle)
            event = await next_of(events, ProcessStarted)
            await containment.entered.wait()
            os.killpg(event.pid, signal.SIGKILL)
            await next_of(events, ProcessExited)
        assert containment.calls == []  # the record's removal waits for its write
        containment.gate.set()
        with trio.fail_after(READY_S):
            while containment.calls != ["record", "forget"]:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert not (instance_dir / RECORD_NAME).exists()
        assert (runtime.status(handle)).state is InstanceState.EXITED
