"""The web page's history: bounded series over the last hour, events dated by the wall
clock, the last failure kept, CPU from readings a step apart."""

from __future__ import annotations

import pytest

from inferactors._edges.engine_metrics import TreeUsage
from inferactors._events import DeepHealthPassed, ProcessExited, RestartScheduled, StateChanged
from inferactors._service.ui_history import POINTS, STEP_S, TIMELINE, WINDOW_S, UiHistory
from inferactors._status import InstanceState
from inferactors._stop_reasons import StopReason


class Clocks:
    """A wall clock and a monotonic one, moved by hand (the wall 1.8e9 s ahead)."""

    def __init__(self) -> None:
        self.now = 100.0

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now

    def monotonic(self) -> float:
        return self.now


def history() -> tuple[UiHistory, Clocks]:
    clocks = Clocks()
    return UiHistory(wall=clocks.wall, monotonic=clocks.monotonic), clocks


def test_probes_fold_into_steps_of_their_mean_and_largest() -> None:
    kept, clocks = history()
    clocks.now = 1000.0  # a step boundary (1_800_001_000 is a multiple of 5)
    for latency in (0.002, 0.004, 0.012):
        kept.on_probe("chat", latency)
    clocks.now += STEP_S
    kept.on_probe("chat", 0.001)
    probe = kept.series("chat")["probe"]
    assert [point[0] for point in probe] == [1_800_001_000.0, 1_800_001_005.0]
    assert probe[0][1:] == [pytest.approx(0.006), 0.012]
    assert probe[1][1:] == [0.001, 0.001]


def test_events_are_dated_by_the_wall_clock_when_they_happened() -> None:
    kept, clocks = history()
    clocks.now = 50.0
    change = StateChanged("chat-1", InstanceState.LOADED, InstanceState.RUNNING, None, 42.5)
    kept.on_event("chat", change)
    [dated] = kept.timeline("chat")
    assert dated.event is change
    assert dated.at == 1_800_000_042.5  # 7.5 s before it was heard


def test_restarts_and_first_tokens_become_series_and_old_points_leave_the_window() -> None:
    kept, clocks = history()
    kept.on_event("chat", RestartScheduled("chat-1", 1, 2.0, clocks.now))
    kept.on_event("chat", DeepHealthPassed("chat-1", 0.25, clocks.now))
    clocks.now += WINDOW_S / 2
    kept.on_event("chat", RestartScheduled("chat-1", 2, 4.0, clocks.now))
    assert kept.series("chat")["restarts"] == [1_800_000_100.0, 1_800_001_900.0]
    assert kept.series("chat")["ttft"] == [[1_800_000_100.0, 0.25]]
    clocks.now += WINDOW_S / 2 + 1
    assert kept.series("chat")["restarts"] == [1_800_001_900.0]
    assert kept.series("chat")["ttft"] == []


def test_every_series_and_the_timeline_are_bounded() -> None:
    kept, clocks = history()
    for n in range(3 * POINTS):
        clocks.now += 0.1
        kept.on_event("chat", RestartScheduled("chat-1", n, 1.0, clocks.now))
        kept.on_probe("chat", 0.001)
    one = kept.of("chat")
    assert len(one.restarts) == POINTS
    assert len(one.timeline) == TIMELINE
    newest = one.timeline[-1].event
    assert isinstance(newest, RestartScheduled)
    assert newest.attempt == 3 * POINTS - 1  # the newest are kept


def test_cpu_is_the_cpu_time_spent_between_two_readings_of_one_process() -> None:
    kept, clocks = history()
    kept.on_usage({"chat": (42, TreeUsage(rss_bytes=1000, cpu_s=1.0))})
    assert kept.usage_now("chat", 42) == (1000, None)
    clocks.now += 5.0
    kept.on_usage({"chat": (42, TreeUsage(rss_bytes=3000, cpu_s=3.5))})
    assert kept.usage_now("chat", 42) == (3000, 50.0)
    clocks.now += 5.0
    kept.on_usage({"chat": (43, TreeUsage(rss_bytes=500, cpu_s=0.1))})  # a new process
    assert kept.usage_now("chat", 43) == (500, None)
    assert kept.usage_now("chat", 42) == (None, None)  # not the process shown now
    assert kept.series("chat")["memory"] == [
        [1_800_000_100.0, 1000],
        [1_800_000_105.0, 3000],
        [1_800_000_110.0, 500],
    ]
    assert kept.series("chat")["cpu"] == [[1_800_000_105.0, 50.0]]


def test_the_last_failed_exit_is_kept_and_a_requested_stop_does_not_replace_it() -> None:
    kept, _ = history()
    crash = ProcessExited("chat-1", 7, 3, None, StopReason.CRASH, 90.0, last_lines=("boom",))
    stop = ProcessExited("chat-1", 8, 0, None, StopReason.REQUESTED, 95.0)
    kept.on_event("chat", crash)
    kept.on_event("chat", stop)
    last = kept.last_failure("chat")
    assert last is not None
    assert last.event is crash
    assert kept.last_failure("embed") is None


def test_instances_gone_from_the_run_file_are_dropped() -> None:
    kept, _ = history()
    kept.on_probe("chat", 0.001)
    kept.on_probe("old", 0.001)
    kept.keep_only(["chat"])
    assert kept.timeline("old") == ()
    assert kept.series("old")["probe"] == []
    assert kept.series("chat")["probe"] != []
