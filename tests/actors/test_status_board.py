"""The status board (issue 11 item 1): `status` and `statuses` read what the actors
published, with no message and no I/O, under trio's MockClock on a `FakeFleet`.

The reads are plain functions (not coroutines): they cannot send a message or wait on
anything; the awaited spelling, deprecated, is `test_embedding_status.py`'s. Uptime
moves on between publications; the supervisor's word (restarts, supervision) is on the
board before the actor hears of it; an unloaded instance leaves the board at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing

from actors.managed_support import chat, fake_fleet_config
from inferactors import (
    InferRuntime,
    InstanceState,
    RestartPolicy,
    RestartScheduled,
    open_runtime,
)
from inferactors.testing import FakeFleet

T = TypeVar("T")
POLICY = RestartPolicy(max_restarts=3, base_s=2.0, jitter=0.0)


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet()


@pytest.fixture
async def runtime(tmp_path: Path, tiny_gguf: Path, fleet: FakeFleet) -> AsyncIterator[InferRuntime]:
    config = fake_fleet_config(tmp_path, tiny_gguf, POLICY)
    async with open_runtime(config, node_id="board", edges=fleet.edges()) as opened:
        yield opened


async def test_a_status_read_takes_no_time_and_its_uptime_moves_on(
    runtime: InferRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.load(chat(8101))
    await runtime.start(handle)
    with trio.fail_after(60):
        first = await runtime.wait_state(handle, InstanceState.RUNNING)
    assert first.uptime_s is not None
    read = runtime.status(handle)
    await trio.sleep(0.25)  # shorter than a probe interval: nothing is published meanwhile
    later = runtime.status(handle)
    assert read.uptime_s is not None
    assert later.uptime_s == pytest.approx(read.uptime_s + 0.25)
    assert (later.state, later.pid) == (InstanceState.RUNNING, first.pid)


async def test_statuses_gives_every_instance_in_load_order_and_forgets_the_unloaded(
    runtime: InferRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    handles = [await runtime.load(chat(8110 + i, role=f"r{i}")) for i in range(3)]
    await runtime.start(handles[1])
    with trio.fail_after(60):
        await runtime.wait_state(handles[1], InstanceState.RUNNING)
    every = runtime.statuses()
    assert list(every) == handles == list(await runtime.instances())
    states = [status.state for status in every.values()]
    assert states == [InstanceState.LOADED, InstanceState.RUNNING, InstanceState.LOADED]
    await runtime.unload(handles[0])
    assert list(runtime.statuses()) == handles[1:]
    gone = runtime.status(handles[0])
    assert gone.state is InstanceState.UNKNOWN
    assert gone.detail == f"no instance {handles[0].instance_id} is loaded"


async def test_the_supervisors_word_is_read_as_soon_as_its_event(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    events = await runtime.subscribe()
    handle = await runtime.load(chat(8120))
    await runtime.start(handle)
    with trio.fail_after(60):
        await runtime.wait_state(handle, InstanceState.RUNNING)
    fleet.last.crash(exit_code=1)  # the supervisor schedules a restart
    with trio.fail_after(60):
        async for event in events:
            if isinstance(event, RestartScheduled):
                break
    status = runtime.status(handle)  # read in the same step the event arrived in
    assert status.supervision == "restarting in 2.0 s (attempt 1)"
    assert status.restarts == 1


async def test_a_status_after_the_runtime_ended_is_unknown(
    tmp_path: Path, tiny_gguf: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = fake_fleet_config(tmp_path, tiny_gguf, POLICY)
    async with open_runtime(config, node_id="board", edges=FakeFleet().edges()) as runtime:
        handle = await runtime.load(chat(8130))
    status = runtime.status(handle)
    assert (status.state, status.detail) == (
        InstanceState.UNKNOWN,
        "the runtime is closed",
    )
    assert runtime.statuses() == {}


async def test_the_view_dates_its_state_and_names_the_signal_that_ended_it(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    """``since`` is the trio time the state shown began (a publication in the same state
    keeps it); ``signal`` is the number of the signal that ended the last process."""
    handle = await runtime.load(chat(8120))
    await runtime.start(handle)
    with trio.fail_after(60):
        running = await runtime.wait_state(handle, InstanceState.RUNNING)
    assert running.since is not None
    assert running.signal is None
    went_up = trio.current_time()
    await trio.sleep(5)  # probes publish meanwhile: the state, and its date, hold
    still = runtime.status(handle)
    assert (still.state, still.since) == (InstanceState.RUNNING, running.since)
    assert running.since <= went_up
    await trio.sleep(1)
    killed_at = trio.current_time()
    fleet.last.crash(signal=9)
    with trio.fail_after(60):
        exited = await runtime.wait_state(handle, InstanceState.EXITED)
    assert (exited.signal, exited.exit_code, exited.stop_reason) == (9, None, "crash")
    assert exited.since == pytest.approx(killed_at, abs=0.01)


async def test_a_stop_that_waits_for_its_server_says_stopping_until_its_kill_deadline(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    """A server that ignores SIGTERM (as one finishing an endless stream does): while the
    stop waits, the status carries its deadline (the stop's time + its grace); SIGKILL at
    that deadline ends it and clears it."""
    fleet.ignore_term = True
    handle = await runtime.load(chat(8121))
    await runtime.start(handle)
    with trio.fail_after(60):
        await runtime.wait_state(handle, InstanceState.RUNNING)
    asked_at = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.stop, handle, 20.0)
        await trio.sleep(5)
        waiting = runtime.status(handle)
        assert waiting.pid is not None
        assert waiting.stop_deadline == pytest.approx(asked_at + 20.0, abs=0.01)
    assert trio.current_time() == pytest.approx(asked_at + 20.0, abs=0.5)
    ended = runtime.status(handle)
    assert (ended.state, ended.stop_deadline, ended.signal) == (InstanceState.EXITED, None, 9)
