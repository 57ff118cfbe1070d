"""The line that says nothing is left comes after the last state changes it sums up: events
queued for the printer are printed first (under load, the printer task could be behind the
task that ends the run), and the given-up instance's own exit, which comes a moment after
the supervisor's give-up, is waited for (``examples/crashing.out`` showed both swapped)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace

import attrs
import pytest
import trio

from inferactors._cli.run import _flush_events, _until_done
from inferactors._events import Event, StateChanged
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState, InstanceStatus


@attrs.define
class _Fleet:
    """What `_until_done` reads of a fleet: its given-up and settled flags, its exit
    status, its members and views (none: the line says nothing is left)."""

    given_up: trio.Event = attrs.Factory(trio.Event)
    settled: trio.Event = attrs.Factory(trio.Event)
    exit_status: int | None = 1
    members: dict[str, object] = attrs.Factory(dict)
    shown: tuple[InstanceView, ...] = ()
    changed: trio.Event = attrs.Factory(trio.Event)

    def views(self) -> tuple[InstanceView, ...]:
        return self.shown

    def name_of(self, instance_id: str) -> str | None:
        return "chat" if instance_id == "chat-1" else None

    def adopted(self, instance_id: str) -> bool:
        return False

    async def until_changed(self) -> None:
        await self.changed.wait()

    def show(self, *views: InstanceView) -> None:
        self.shown = views
        self.changed.set()
        self.changed = trio.Event()


async def _no_signals() -> AsyncIterator[int]:
    await trio.sleep_forever()
    yield 0  # never reached: no signal comes


async def test_queued_state_changes_print_before_nothing_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send, receive = trio.open_memory_channel[Event](8)
    change = StateChanged("chat-1", InstanceState.DEGRADED, InstanceState.EXITED, "gave up", 0.0)
    send.send_nowait(change)  # heard, not yet printed: the printer task never ran
    fleet = _Fleet()
    fleet.given_up.set()
    with caplog.at_level(logging.INFO, logger="inferactors"):
        code = await _until_done(fleet, _no_signals(), lambda: _flush_events(receive, fleet))  # type: ignore[arg-type]
    assert code == 1
    lines = [record.getMessage() for record in caplog.records]
    changed = next(
        i
        for i, line in enumerate(lines)
        if line == "chat  degraded -> exited (failed to start)"
        or line == "chat  degraded -> exited (gave up)"
    )
    left = next(i for i, line in enumerate(lines) if "nothing left" in line)
    assert changed < left, lines
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()  # printed once, by the flush


def _chat(state: InstanceState) -> InstanceView:
    status = InstanceStatus(state, "failed to start", supervision="gave up: config-error: x")
    return InstanceView("chat", "infer.llamacpp", "managed", "chat-1", status)


async def test_the_given_up_instances_own_exit_prints_before_nothing_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send, receive = trio.open_memory_channel[Event](8)
    fleet = _Fleet(shown=(_chat(InstanceState.DEGRADED),))  # the give-up is heard first
    required = SimpleNamespace(entry=SimpleNamespace(required=True))
    fleet.members["chat"] = SimpleNamespace(held_down=lambda: True, placement=required)
    fleet.given_up.set()

    async def the_exit_comes_later() -> None:
        await trio.sleep(0.05)
        old, new = InstanceState.DEGRADED, InstanceState.EXITED
        send.send_nowait(StateChanged("chat-1", old, new, "failed to start", 0.0))
        fleet.show(_chat(InstanceState.EXITED))

    flush = lambda: _flush_events(receive, fleet)  # type: ignore[arg-type]  # noqa: E731
    with caplog.at_level(logging.INFO, logger="inferactors"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(the_exit_comes_later)
            code = await _until_done(fleet, _no_signals(), flush)  # type: ignore[arg-type]
    assert code == 1
    lines = [record.getMessage() for record in caplog.records]
    changed = next(
        i
        for i, line in enumerate(lines)
        if line == "chat  degraded -> exited (failed to start)"
        or line == "chat  degraded -> exited (gave up)"
    )
    left = next(i for i, line in enumerate(lines) if "nothing left" in line)
    assert changed < left, lines
