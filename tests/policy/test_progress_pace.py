"""The pace of progress reports (issue 19 item 4): a chunk-by-chunk hash is shown at most
once per interval and once when done, with its rate and the time it still needs; work that
ends within the interval says nothing."""

from __future__ import annotations

from inferactors._policy.progress_pace import ProgressPace, Reading


def test_reports_are_shown_once_per_interval_with_rate_and_time_left() -> None:
    pace = ProgressPace(interval_s=1.0)
    shown = [
        pace.offer(now, done, 1000)
        for now, done in [(0.0, 0), (0.4, 40), (0.99, 99), (1.0, 100), (1.5, 150), (2.5, 250)]
    ]
    assert shown == [
        None,  # starts the clock
        None,
        None,
        Reading(done=100, total=1000, elapsed_s=1.0, rate=100.0, eta_s=9.0),
        None,
        Reading(done=250, total=1000, elapsed_s=2.5, rate=100.0, eta_s=7.5),
    ]


def test_the_end_is_shown_at_once_after_a_report_but_quick_work_says_nothing() -> None:
    slow = ProgressPace(interval_s=1.0)
    slow.offer(0.0, 0, 300)
    assert slow.offer(1.0, 100, 300) is not None
    end = slow.offer(1.1, 300, 300)
    assert end is not None
    assert end.finished
    assert end.eta_s == 0.0
    quick = ProgressPace(interval_s=1.0)
    assert quick.offer(0.0, 100, 300) is None
    assert quick.offer(0.5, 300, 300) is None


def test_an_unknown_total_has_no_time_left_and_never_finishes() -> None:
    pace = ProgressPace(interval_s=2.0)
    pace.offer(10.0, 0, 0)
    reading = pace.offer(12.0, 0, 0)
    assert reading == Reading(done=0, total=0, elapsed_s=2.0, rate=0.0, eta_s=None)
    assert not reading.finished
