"""``async with runtime.running(spec, timeout=...) as handle`` (issue 19 item 6), under
trio's MockClock on a `FakeFleet`: it yields once the instance is Running and, however the
block ends (its end, an exception, a cancellation, a timeout on the way in), stops the
server and unloads the instance."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from actors.managed_support import chat, fake_fleet_config
from inferactors import (
    InferRuntime,
    InstanceDown,
    InstanceState,
    InvalidConfig,
    RestartPolicy,
    StartTimeout,
    open_runtime,
)
from inferactors.testing import FakeFleet

POLICY = RestartPolicy(max_restarts=0, jitter=0.0)

pytestmark = pytest.mark.usefixtures("inline_threads")  # virtual time only (see conftest)


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet()


@pytest.fixture
async def runtime(tmp_path: Path, tiny_gguf: Path, fleet: FakeFleet) -> AsyncIterator[InferRuntime]:
    config = fake_fleet_config(tmp_path, tiny_gguf, POLICY)
    async with open_runtime(config, node_id="scope", edges=fleet.edges()) as opened:
        yield opened


async def test_it_yields_once_running_and_stops_and_unloads_on_exit(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    fleet.load_s = 3.0
    began = trio.current_time()
    async with runtime.running(chat(8301), timeout=60) as handle:
        assert trio.current_time() - began >= 3.0  # waited for the load
        assert runtime.status(handle).state is InstanceState.RUNNING
        assert handle.role == "chat"
        child = fleet.last
    assert child.returncode == -signal.SIGTERM  # stopped with its grace
    assert runtime.statuses() == {}
    assert runtime.status(handle).state is InstanceState.UNKNOWN


async def test_an_error_in_the_block_still_stops_and_unloads(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(KeyError, match="boom"):
        async with runtime.running(chat(8302), timeout=60):
            raise KeyError("boom")
    assert not fleet.last.alive
    assert runtime.statuses() == {}


async def test_a_cancelled_block_still_stops_and_unloads(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.move_on_after(100):
        async with runtime.running(chat(8303), timeout=60):
            await trio.sleep_forever()
    assert not fleet.last.alive
    assert runtime.statuses() == {}


async def test_a_grace_the_server_ignores_ends_in_sigkill(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    async with runtime.running(chat(8304), timeout=60, grace_s=2.0):
        fleet.last.ignore_term = True
        child = fleet.last
    assert child.returncode == -signal.SIGKILL
    assert runtime.statuses() == {}


async def test_not_running_within_the_timeout_raises_saying_where_it_stood(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    fleet.load_s = 1000.0
    began = trio.current_time()
    with pytest.raises(StartTimeout, match=r"chat \(chat-\w+-scope\) was not running within 5 s"):
        async with runtime.running(chat(8305), timeout=5):
            raise AssertionError("the block must not run")
    assert trio.current_time() - began < 30  # 5 s, then the stop (10 s grace at most)
    assert not fleet.last.alive
    assert runtime.statuses() == {}


async def test_a_give_up_on_the_way_in_raises_at_once(
    runtime: InferRuntime, fleet: FakeFleet, autojump_clock: trio.testing.MockClock
) -> None:
    fleet.load_s = 1000.0

    async def crash_soon() -> None:
        await trio.sleep(1)
        fleet.last.crash(exit_code=3)

    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(crash_soon)
        with pytest.raises(InstanceDown, match="gave up"):
            async with runtime.running(chat(8306), timeout=600):
                raise AssertionError("the block must not run")
    assert trio.current_time() - began < 10
    assert runtime.statuses() == {}


@pytest.mark.parametrize(
    ("within_s", "grace_s", "field"),
    [(0.0, 1.0, "timeout"), (float("nan"), 1.0, "timeout"), (5.0, -1.0, "grace_s")],
)
async def test_bad_durations_are_refused_before_anything_is_loaded(
    runtime: InferRuntime, within_s: float, grace_s: float, field: str
) -> None:
    with pytest.raises(InvalidConfig, match=f"^{field} must be a positive number"):
        async with runtime.running(chat(8307), timeout=within_s, grace_s=grace_s):
            pass
    assert runtime.statuses() == {}
