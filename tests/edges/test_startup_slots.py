"""Start-up slots (``_edges/startup_slots.py``): a few managed servers of one run start at
once, each holding its slot until it prints a readiness line, exits, or `HOLD_S` passed.
Real processes (``sh``), one slot for the run; the slot's own timing under MockClock."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio
import trio.testing

from edges.process_support import Launch
from inferactors._edges import startup_slots
from inferactors._edges.process import ManagedProcess
from inferactors._edges.startup_slots import HOLD_S, StartupSlot, slot_count

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

READY = "main: model loaded"  # llama-server's readiness line (``_policy/ready_lines.py``)


def _shell(tmp_path: Path, script: str) -> Launch:
    return Launch(Path("/bin/sh"), ("-c", script), tmp_path)


@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup_slots, "slot_count", lambda: 1)


@pytest.mark.usefixtures("one_slot")
async def test_the_next_server_starts_once_the_first_says_it_is_ready(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    first = await ManagedProcess.spawn(
        nursery, _shell(tmp_path, f"sleep 0.3; echo '{READY}'; exec sleep 600")
    )
    second = await ManagedProcess.spawn(nursery, _shell(tmp_path, "exec sleep 600"))
    assert first.lines.ready_count == 1  # the second waited for the first's line
    assert second.started_at - first.started_at >= 0.25
    for process in (first, second):
        await process.terminate(grace_s=1.0)


@pytest.mark.usefixtures("one_slot")
async def test_a_server_that_exits_or_says_nothing_lets_the_next_one_start(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery, tmp_path: Path
) -> None:
    monkeypatch.setattr(startup_slots, "HOLD_S", 0.4)
    quiet = await ManagedProcess.spawn(nursery, _shell(tmp_path, "exec sleep 600"))
    after_quiet = await ManagedProcess.spawn(nursery, _shell(tmp_path, "exit 3"))
    assert after_quiet.started_at - quiet.started_at >= 0.35  # the hold's bound
    began = trio.current_time()
    last = await ManagedProcess.spawn(nursery, _shell(tmp_path, "exec sleep 600"))
    assert last.started_at - began < 0.35  # the exit gave the slot back at once
    for process in (quiet, last):
        await process.terminate(grace_s=1.0)
    await after_quiet.wait_exited()


async def test_a_slot_is_held_until_its_first_sign_or_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert slot_count() >= 2
    ready = trio.Event()
    slots = [await StartupSlot.take() for _ in range(slot_count())]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(slots[0].hold_until, ready.wait)
        nursery.start_soon(functools.partial(slots[1].hold_until))  # no sign: the bound
        began = trio.current_time()
        await trio.sleep(0.5)
        ready.set()
        taken = await StartupSlot.take()  # the first was given back at its sign
        assert trio.current_time() - began == pytest.approx(0.5)
        again = await StartupSlot.take()  # the second only at the bound
        assert trio.current_time() - began == pytest.approx(HOLD_S)
    for slot in (taken, again, *slots):
        slot.release()
        slot.release()  # idempotent
