"""The line that says nothing is left comes after the last state changes it sums up: the
printer catches up first (`EventPrinter.catch_up`), printing the events queued for it and
the one already handed to its task (under load, the printer task could be behind the task
that ends the run: ``examples/crashing.out`` showed both swapped)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
import trio.testing

from inferactors._cli.run import _until_done
from inferactors._cli.run_printer import EventPrinter
from inferactors._events import Event, StateChanged
from inferactors._status import InstanceState

EXITED = StateChanged("chat-1", InstanceState.DEGRADED, InstanceState.EXITED, "gave up", 0.0)
EXITED_LINE = "chat  degraded -> exited (gave up)"


@attrs.define
class _Fleet:
    """What `_until_done` and the printer read of a fleet: its given-up and settled
    flags, its exit status, its names, its members and views (none: nothing is left)."""

    given_up: trio.Event = attrs.Factory(trio.Event)
    settled: trio.Event = attrs.Factory(trio.Event)
    exit_status: int | None = 1
    members: dict[str, object] = attrs.Factory(dict)

    def views(self) -> tuple[()]:
        return ()

    def name_of(self, instance_id: str) -> str | None:
        return "chat" if instance_id == "chat-1" else None

    def adopted(self, instance_id: str) -> bool:
        return False


async def _no_signals() -> AsyncIterator[int]:
    await trio.sleep_forever()
    yield 0  # never reached: no signal comes


def _order(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    lines = [record.getMessage() for record in caplog.records]
    changed = lines.index(EXITED_LINE)
    left = next(i for i, line in enumerate(lines) if "nothing left" in line)
    return changed, left


async def test_queued_state_changes_print_before_nothing_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send, receive = trio.open_memory_channel[Event](8)
    send.send_nowait(EXITED)  # heard, not yet printed: the printer task never ran
    fleet = _Fleet()
    fleet.given_up.set()
    printer = EventPrinter(receive, fleet)
    with caplog.at_level(logging.INFO, logger="inferactors"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(printer.run)  # not run yet: the event is queued for it
            code = await _until_done(fleet, _no_signals(), printer)  # type: ignore[arg-type]
            nursery.cancel_scope.cancel()
    assert code == 1
    changed, left = _order(caplog)
    assert changed < left
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()  # printed once


async def test_an_event_handed_to_the_printer_prints_before_nothing_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exit is sent to the printer waiting for it and the fleet gives up in the same
    step: whichever task trio runs first, the exit's line comes first (run many times, so
    both orders are taken)."""
    for _ in range(40):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="inferactors"):
            code = await _exit_then_give_up()
        assert code == 1
        changed, left = _order(caplog)
        assert changed < left
        lines = [record.getMessage() for record in caplog.records]
        assert lines.count(EXITED_LINE) == 2  # each event printed once, none lost


async def _exit_then_give_up() -> int:
    send, receive = trio.open_memory_channel[Event](8)
    fleet = _Fleet()
    printer = EventPrinter(receive, fleet)
    codes: list[int] = []
    done = trio.Event()

    async def until_done() -> None:
        codes.append(await _until_done(fleet, _no_signals(), printer))  # type: ignore[arg-type]
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(printer.run)
        nursery.start_soon(until_done)
        await trio.testing.wait_all_tasks_blocked()  # both wait
        send.send_nowait(EXITED)  # handed to the printer's task, not queued
        fleet.given_up.set()  # and the give-up heard in the same step
        await done.wait()
        send.send_nowait(EXITED)  # the printer goes on after (the shutdown's)
        send.close()
    return codes[0]


async def test_catch_up_returns_at_once_when_the_stream_ended() -> None:
    send, receive = trio.open_memory_channel[Event](8)
    printer = EventPrinter(receive, _Fleet())
    send.close()
    await printer.run()
    with trio.fail_after(1):
        await printer.catch_up()
