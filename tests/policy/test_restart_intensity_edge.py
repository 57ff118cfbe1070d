"""OTP's restart intensity counts a restart exactly ``period_s`` old: its supervisor keeps
every restart ``R >= Now - Period`` in the window. With intensity 2 in 10 s, restarts at
1.5 and 3.5 s leave room for none at 11.5 s, and one at 11.6 s is allowed again."""

from __future__ import annotations

import pytest

from inferactors import RestartPolicy, StopReason
from inferactors._policy.restart import GiveUp, Restart, RestartBudget

POLICY = RestartPolicy(
    max_restarts=100, base_s=0.1, cap_s=0.1, intensity=2, period_s=10.0, jitter=0.0
)


def _crash(budget: RestartBudget, now: float) -> tuple[RestartBudget, object]:
    return budget.decide(reason=StopReason.CRASH, exit_code=1, signal=None, now=now)


def _two_restarts() -> RestartBudget:
    budget = RestartBudget(POLICY)
    for now in (1.5, 3.5):
        budget, decision = _crash(budget, now)
        assert isinstance(decision, Restart)
        budget = budget.note_running(now + 0.1).note_not_running()
    return budget


def test_a_restart_exactly_period_s_old_still_counts() -> None:
    _, decision = _crash(_two_restarts(), 11.5)
    assert isinstance(decision, GiveUp)
    assert "intensity" in decision.why, decision.why


@pytest.mark.parametrize("now", [11.6, 20.0])
def test_a_restart_older_than_period_s_leaves_the_window(now: float) -> None:
    _, decision = _crash(_two_restarts(), now)
    assert isinstance(decision, Restart)
