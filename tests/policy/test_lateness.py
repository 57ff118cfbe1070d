"""The lateness rule (``_policy/lateness.py``), pure: when a deadline that fired judges a
server, what an exposure connect says, and when the supervisor is overloaded."""

from __future__ import annotations

import pytest

from inferactors._policy.lateness import (
    LATE_S,
    CaughtUp,
    ConnectResult,
    Lateness,
    Overload,
    OverloadWatch,
    Reach,
    connect_reach,
    gives_no_verdict,
    no_verdict_why,
)


@pytest.mark.parametrize(
    ("lateness", "no_verdict"),
    [
        (Lateness(), False),
        (Lateness(fired_late_s=LATE_S), False),  # at the limit: still the server's
        (Lateness(fired_late_s=LATE_S + 0.01), True),
        (Lateness(stalled_s=0.3), True),  # on time, but the loop did not run for 0.3 s
        (Lateness(fired_late_s=0.15, stalled_s=0.15), True),  # together past the limit
        (Lateness(fired_late_s=-1.0, stalled_s=0.1), False),  # early is not negative lateness
    ],
)
def test_a_deadline_gives_no_verdict_only_when_our_lateness_passes_the_limit(
    lateness: Lateness, no_verdict: bool
) -> None:
    assert gives_no_verdict(lateness) is no_verdict


def test_the_no_verdict_words_name_the_request_and_our_lateness() -> None:
    why = no_verdict_why("GET /health", Lateness(0.5, 0.34))
    assert why == (
        "GET /health: no verdict: inferactors' event loop ran 840 ms late "
        "(the supervisor is overloaded; the server may be fine)"
    )


ON_TIME = Lateness()
LATE = Lateness(fired_late_s=0.9)


@pytest.mark.parametrize(
    ("result", "lateness", "loopback", "reach"),
    [
        (ConnectResult.ACCEPTED, ON_TIME, True, Reach.REACHABLE),
        (ConnectResult.ACCEPTED, LATE, False, Reach.REACHABLE),  # an accept is a fact
        (ConnectResult.REFUSED, ON_TIME, True, Reach.NOT_REACHABLE),
        (ConnectResult.REFUSED, LATE, False, Reach.NOT_REACHABLE),
        (ConnectResult.SILENT, ON_TIME, True, Reach.NO_VERDICT),  # never "reachable"
        (ConnectResult.SILENT, LATE, True, Reach.NO_VERDICT),
        (ConnectResult.SILENT, LATE, False, Reach.NO_VERDICT),  # our lateness: no verdict
        (ConnectResult.SILENT, ON_TIME, False, Reach.NOT_REACHABLE),  # a filtered address
    ],
)
def test_what_a_connect_says(
    result: ConnectResult, lateness: Lateness, loopback: bool, reach: Reach
) -> None:
    assert connect_reach(result, lateness, loopback=loopback) is reach


def test_an_overload_starts_once_and_ends_after_a_calm_period() -> None:
    watch = OverloadWatch(calm_s=5.0)
    assert watch.stalled(1.0, LATE_S) is None  # a stall up to the limit is no sign
    assert watch.current is None
    started = watch.lost_verdict(2.0, "GET /health: no verdict: ...")
    assert started == Overload(2.0, "GET /health: no verdict: ...")
    assert watch.stalled(3.0, 0.9) is None  # already overloaded: not reported again
    assert watch.lost_verdict(4.0, "again") is None
    assert watch.calm_at() == 9.0
    assert watch.calm(8.9) is None
    assert watch.calm(9.0) == CaughtUp(9.0, 7.0, 2, 0.9)
    assert (watch.current, watch.calm_at(), watch.no_verdicts_total) == (None, None, 2)
    assert watch.stalled(10.0, 1.0) == Overload(10.0, "event loop stalled 1000 ms")
