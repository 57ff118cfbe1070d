"""The line that says nothing is left comes after the last state changes it sums up: events
queued for the printer are printed first (under load, the printer task could be behind the
task that ends the run, and ``examples/crashing.out`` showed the lines swapped)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import attrs
import pytest
import trio

from inferactors._cli.run import _flush_events, _until_done
from inferactors._events import Event, StateChanged
from inferactors._status import InstanceState


@attrs.define
class _Fleet:
    """What `_until_done` reads of a fleet: its given-up and settled flags, its exit
    status, its members and views (none: the line says nothing is left)."""

    given_up: trio.Event = attrs.Factory(trio.Event)
    settled: trio.Event = attrs.Factory(trio.Event)
    exit_status: int | None = 1
    members: dict[str, object] = attrs.Factory(dict)

    def views(self) -> tuple[object, ...]:
        return ()


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
        code = await _until_done(fleet, _no_signals(), lambda: _flush_events(receive))  # type: ignore[arg-type]
    assert code == 1
    lines = [record.getMessage() for record in caplog.records]
    changed = next(i for i, line in enumerate(lines) if "degraded -> exited" in line)
    left = next(i for i, line in enumerate(lines) if "nothing left" in line)
    assert changed < left, lines
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()  # printed once, by the flush
