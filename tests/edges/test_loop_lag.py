"""The loop's own lateness (``_edges/loop_lag.py``) measured around real stalls: a task that
really blocks the loop (a synchronous sleep), not a mocked one; the stall accounting itself
under trio's MockClock, whose jumps inside a task step are stalls once the instrument is
installed (`measure_loop_lag`), and nothing when it is not (a runtime under MockClock says
``Edges(measure_loop_lag=False)``). The overload report starts once and ends after a calm
period."""

from __future__ import annotations

import time

import pytest
import trio
import trio.lowlevel
import trio.testing

from inferactors._edges.loop_lag import STALL_S, lateness, loop_lag, measure_loop_lag, no_verdict
from inferactors._policy.lateness import LATE_S, CaughtUp, Overload

BLOCK_S = 0.4


async def _block_soon(seconds: float) -> None:
    await trio.sleep(0.02)
    time.sleep(seconds)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


async def test_a_blocked_loop_is_measured_as_a_stall_inside_the_window() -> None:
    lag = measure_loop_lag()
    assert loop_lag() is lag  # one per run
    assert measure_loop_lag() is lag  # installed once
    async with trio.open_nursery() as nursery:
        began = trio.current_time()
        nursery.start_soon(_block_soon, BLOCK_S)
        await trio.sleep(BLOCK_S + 0.1)
    stalled = lag.stalled_between(began, trio.current_time())
    assert BLOCK_S - 0.02 <= stalled < BLOCK_S + 0.3  # the machine may add its own
    assert lag.stalled_between(began - 10.0, began) == 0.0  # not before it


async def test_a_deadline_the_blocked_loop_ate_gives_no_verdict_and_is_an_overload() -> None:
    lag = measure_loop_lag()
    lag.watch.calm_s = 0.3
    reports: list[Overload | CaughtUp] = []

    async def read_reports() -> None:
        async for report in lag.reports():
            reports.append(report)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_reports)
        began = trio.current_time()
        deadline = began + 0.3
        nursery.start_soon(_block_soon, 0.3 + LATE_S + 0.2)
        with trio.move_on_at(deadline):
            await trio.sleep_forever()
        late = lateness(began, deadline)
        assert late.ours_s > LATE_S
        why = no_verdict("GET /health", began, deadline)
        assert why is not None
        assert why.startswith("GET /health: no verdict: inferactors' event loop ran ")
        await trio.sleep(1.0)  # calm: the overload ends
        nursery.cancel_scope.cancel()
    assert [type(report) for report in reports] == [Overload, CaughtUp]
    assert isinstance(reports[1], CaughtUp)
    assert reports[1].no_verdicts == 1
    assert reports[1].worst_stall_s > LATE_S


async def test_a_short_block_is_no_verdict_lost() -> None:
    measure_loop_lag()
    async with trio.open_nursery() as nursery:
        began = trio.current_time()
        nursery.start_soon(_block_soon, 0.05)
        await trio.sleep(0.3)
        assert no_verdict("GET /health", began, began + 0.2) is None


async def test_not_installed_nothing_stalls(autojump_clock: trio.testing.MockClock) -> None:
    lag = loop_lag()
    began = trio.current_time()
    for _ in range(5):
        await trio.sleep(10.0)  # the clock jumps while the loop waits: no stall
    assert lag.stalled_between(began, trio.current_time()) == 0.0
    assert lag.overloaded is None
    assert STALL_S < LATE_S


@pytest.mark.parametrize("seconds", [0.0, 0.01])
async def test_no_stall_is_recorded_for_a_quick_loop(seconds: float) -> None:
    lag = loop_lag()
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_block_soon, seconds)
    assert lag.stalled_between(began, trio.current_time()) < STALL_S + 0.05


async def test_a_step_the_clock_jumps_in_is_a_stall_counted_inside_each_window(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The clock moves only when told: a jump inside a task step is a step that ran that
    long, so the accounting is exact."""
    lag = measure_loop_lag()
    began = trio.current_time()
    mock_clock.jump(0.5)  # this step ran 0.5 s
    assert lag.stalled_between(began, began + 0.5) == 0.5  # the step under way counts
    await trio.lowlevel.checkpoint()  # the loop waits for I/O: the stall is kept
    assert lag.stalled_between(began, began + 0.5) == 0.5
    assert lag.stalled_between(began + 0.2, began + 0.4) == pytest.approx(0.2)  # clipped
    assert lag.stalled_between(began - 10.0, began) == 0.0
    assert lag.overloaded is not None  # longer than LATE_S: an overload begins
    short = trio.current_time()
    mock_clock.jump(STALL_S / 2)  # a short step: no stall
    await trio.lowlevel.checkpoint()
    assert lag.stalled_between(short, trio.current_time()) == 0.0


async def test_a_deadline_inside_the_stall_gives_no_verdict(
    mock_clock: trio.testing.MockClock,
) -> None:
    lag = measure_loop_lag()
    began = trio.current_time()
    deadline = began + 0.3
    mock_clock.jump(0.5)  # the loop ran nothing past the deadline
    await trio.lowlevel.checkpoint()
    late = lateness(began, deadline)
    assert late.fired_late_s == pytest.approx(0.2)
    assert late.stalled_s == pytest.approx(0.3)
    why = no_verdict("GET /health", began, deadline)
    assert why is not None
    assert why.startswith("GET /health: no verdict: inferactors' event loop ran ")
    assert lag.watch.no_verdicts_total == 1
    fair = trio.current_time()
    mock_clock.jump(0.01)  # a short step: the server had its whole budget
    await trio.lowlevel.checkpoint()
    assert no_verdict("GET /health", fair, fair + 0.005) is None


async def test_uninstalled_the_same_jump_is_no_stall(mock_clock: trio.testing.MockClock) -> None:
    lag = loop_lag()
    began = trio.current_time()
    mock_clock.jump(0.5)
    await trio.lowlevel.checkpoint()
    assert lag.stalled_between(began, trio.current_time()) == 0.0
    assert no_verdict("GET /health", began, began + 0.3) is None
