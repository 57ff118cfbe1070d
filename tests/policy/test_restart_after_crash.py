"""An instance that crashed (stop reason ``error``: its own code raised, issue 8 item 1) is
restarted and counted like a server that crashed: the exit is abnormal whatever status the
stopped server exited with, so permanent and transient instances restart and spend their
budget; a temporary one does not restart.
"""

from __future__ import annotations

from inferactors import RestartPolicy, RestartType, StopReason
from inferactors._policy.restart import GiveUp, NoRestart, Restart, RestartBudget, is_abnormal


def test_an_error_stop_is_abnormal_whatever_the_exit_status() -> None:
    assert is_abnormal(StopReason.ERROR, 0, None)
    assert is_abnormal(StopReason.ERROR, None, None)
    assert not is_abnormal(StopReason.CRASH, 0, None)  # a server's clean exit of its own


def test_a_transient_instance_that_crashed_is_restarted_and_counted() -> None:
    policy = RestartPolicy(
        max_restarts=1, base_s=1.0, restart_type=RestartType.TRANSIENT, jitter=0.0
    )
    budget, first = RestartBudget(policy).decide(
        reason=StopReason.ERROR, exit_code=0, signal=None, now=0.0
    )
    assert first == Restart(attempt=1, delay_s=1.0)
    _, second = budget.decide(reason=StopReason.ERROR, exit_code=0, signal=None, now=5.0)
    assert isinstance(second, GiveUp)
    assert second.attempts == 1


def test_a_temporary_instance_that_crashed_is_not_restarted() -> None:
    policy = RestartPolicy(restart_type=RestartType.TEMPORARY)
    _, decision = RestartBudget(policy).decide(
        reason=StopReason.ERROR, exit_code=None, signal=15, now=0.0
    )
    assert isinstance(decision, NoRestart)
