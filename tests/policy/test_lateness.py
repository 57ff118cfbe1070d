"""The lateness rule (``_policy/lateness.py``), pure: when a deadline that fired judges a
server, what an exposure connect says, and when the supervisor is overloaded."""

from __future__ import annotations

import pytest

from inferactors._policy.lateness import (
    JUDGE_AFTER_TIMEOUTS,
    LATE_S,
    MAX_STRETCH,
    NO_VERDICT_BOUND_S,
    SAY_NO_VERDICT_S,
    CaughtUp,
    ConnectResult,
    Lateness,
    Overload,
    OverloadWatch,
    Reach,
    VerdictBound,
    connect_reach,
    deferred_delay_s,
    gives_no_verdict,
    judged_anyway,
    judges_timeout,
    no_verdict_report,
    no_verdict_why,
    no_verdict_words,
    timed_out_why,
)
from inferactors._policy.probe_report import ServerReport, Unreachable, Up


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
    assert watch.stalled(10.0, 1.0) == Overload(9.0, "event loop stalled 1000 ms")


def test_an_overload_begun_by_a_stall_lasts_from_the_stall_start() -> None:
    watch = OverloadWatch(calm_s=5.0)
    started = watch.stalled(120.0, 20.0)  # the loop stopped at 100 and ran again at 120
    assert started == Overload(100.0, "event loop stalled 20000 ms")
    caught_up = watch.calm(125.0)
    assert caught_up == CaughtUp(125.0, 25.0, 0, 20.0)  # the stall counts, not only the calm


# The bound on going without a verdict (issue 16's breaker: a hung server read Running
# for 90 s+ under a lasting overload, since every late probe was thrown away whole).


@pytest.mark.parametrize(
    ("elapsed_s", "lateness", "budget_s", "judges"),
    [
        (2.0, Lateness(), 2.0, True),  # on time: a timeout
        (2.1, Lateness(fired_late_s=0.1), 2.0, True),  # within LATE_S
        (2.5, Lateness(fired_late_s=0.5, stalled_s=0.4), 2.0, False),  # lost 0.9 of 2 s
        (6.0, Lateness(stalled_s=3.5), 2.0, True),  # stretched: 2.5 s left to the server
        (6.0, Lateness(stalled_s=4.5), 2.0, False),  # stretched, but only 1.5 s fair
        (6.0, Lateness(fired_late_s=0.5, stalled_s=3.5), 2.0, False),  # 2.0 s: no margin
        (6.0, Lateness(fired_late_s=0.5, stalled_s=3.25), 2.0, True),  # 2.25 s fair
        (2.9, Lateness(fired_late_s=0.9), 2.0, False),  # unstretched: never by this test
    ],
)
def test_a_late_timeout_judges_when_its_time_less_our_lateness_reaches_the_budget(
    elapsed_s: float, lateness: Lateness, budget_s: float, judges: bool
) -> None:
    assert judges_timeout(elapsed_s, lateness, budget_s) is judges


@pytest.mark.parametrize(
    ("lost_at", "lost_s", "now", "stretch_s", "anyway"),
    [
        (None, 0.0, 100.0, 0.0, False),  # the last probe judged: nothing to bound
        (100.0, 0.9, 100.0 + JUDGE_AFTER_TIMEOUTS * 2.0 - 0.1, 0.0, False),  # too soon
        (100.0, 0.9, 100.0 + JUDGE_AFTER_TIMEOUTS * 2.0, 2.0, False),  # at least timeout_s
        (100.0, 5.0, 110.0, 5.0, False),  # the lateness measured
        (100.0, 60.0, 110.0, MAX_STRETCH * 2.0, False),  # at most MAX_STRETCH timeouts
        (100.0, 60.0, 118.0, 4.0, False),  # never past the bound: 118 + 2 + 4 = 124
        (100.0, 60.0, 122.5, 0.0, False),  # a probe that would end past it: not stretched
        (100.0, 60.0, 100.0 + NO_VERDICT_BOUND_S, 0.0, True),  # the bound, in seconds
    ],
)
def test_the_verdict_bound_stretches_then_judges_anyway(
    lost_at: float | None, lost_s: float, now: float, stretch_s: float, anyway: bool
) -> None:
    bound = VerdictBound(timeout_s=2.0)
    if lost_at is not None:
        bound.lost(lost_at, lost_s)
        bound.lost(lost_at + 1.0, lost_s / 2)  # the worst lateness stands; since stays
    assert bound.stretch_s(now) == stretch_s
    assert bound.judge_anyway(now) is anyway
    bound.judged(now)
    assert bound.stretch_s(now) == 0.0
    assert not bound.judge_anyway(now)


def test_the_verdict_bound_counts_time_since_the_last_verdict_not_probes() -> None:
    bound = VerdictBound(timeout_s=2.0)
    bound.judged(50.0)  # the last verdict (the server answered "up")
    bound.lost(51.0, 3.0)  # the first probe that gave none began a second later
    assert bound.lasted_s(60.0) == 10.0  # counted from the verdict, not from 51
    assert not bound.judge_anyway(50.0 + NO_VERDICT_BOUND_S - 0.1)
    assert bound.judge_anyway(50.0 + NO_VERDICT_BOUND_S)
    # a stretched deadline ends by the bound: started + timeout + stretch <= the bound
    stretched = {at: bound.stretch_s(at) for at in (56.0, 60.0, 66.0, 70.0, 71.5, 73.0)}
    assert stretched == {56.0: 3.0, 60.0: 3.0, 66.0: 3.0, 70.0: 2.0, 71.5: 0.5, 73.0: 0.0}


def test_a_report_judged_at_the_bound_is_unreachable_with_its_words() -> None:
    late = ServerReport(Unreachable("GET /health: no verdict: ran 900 ms late", overloaded=True))
    judged = judged_anyway(late, 25.2, NO_VERDICT_BOUND_S)
    assert not judged.no_verdict
    assert judged.health == Unreachable(
        "GET /health: no verdict: ran 900 ms late; judged: no verdict for 25 s (the bound is 24 s)"
    )


def test_a_late_model_list_keeps_its_health_and_is_judged_as_an_unreadable_list() -> None:
    why = "GET /v1/models: no verdict: ran 900 ms late"
    late = no_verdict_report(why, 0.01, Up())
    assert (late.health, late.no_verdict, late.no_verdict_why) == (Up(), True, why)
    judged = judged_anyway(late, 24.0, NO_VERDICT_BOUND_S)
    assert not judged.no_verdict
    assert judged.health == Up()  # /health answered: never called Unreachable
    assert judged.models_problem == (
        f"model list unreadable: {why}; judged: no verdict for 24 s (the bound is 24 s)"
    )


@pytest.mark.parametrize(
    ("lasted_s", "last", "words"),
    [
        (0.0, "server up", None),
        (SAY_NO_VERDICT_S - 0.1, "server up", None),
        (
            SAY_NO_VERDICT_S,
            "server up",
            "no verdict for over 4 s: the supervisor is overloaded (last answer: server up)",
        ),
        (13.9, None, "no verdict for over 12 s: the supervisor is overloaded"),
    ],
)
def test_a_lasting_no_verdict_is_said_in_steps(
    lasted_s: float, last: str | None, words: str | None
) -> None:
    assert no_verdict_words(lasted_s, last) == words


@pytest.mark.parametrize(
    ("tries", "phase", "delay_s"),
    [
        (0, 0.0, 1.0),
        (1, 0.0, 2.0),
        (3, 0.0, 8.0),
        (4, 0.0, 16.0),
        (40, 0.0, 16.0),
        (0, 0.5, 1.25),
        (4, 0.999, 16.0 * 1.4995),
    ],
)
def test_an_admission_without_a_verdict_is_rechecked_paced_and_spread(
    tries: int, phase: float, delay_s: float
) -> None:
    assert deferred_delay_s(tries, phase) == pytest.approx(delay_s)


@pytest.mark.parametrize(
    ("given_s", "words"),
    [
        (2.0, "GET /v1/models: no complete reply within 2 s"),
        (6.0, "GET /v1/models: no complete reply within 2 s"),  # stretched: judged on 2 s
        (0.52, "GET /v1/models: no complete reply within the 0.5 s left of the probe's 2 s"),
        (-0.1, "GET /v1/models: no complete reply within the 0.0 s left of the probe's 2 s"),
    ],
)
def test_a_timeout_says_how_much_of_the_probe_deadline_the_request_had(
    given_s: float, words: str
) -> None:
    assert timed_out_why("GET /v1/models", given_s, 2.0) == words
