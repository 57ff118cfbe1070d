"""The config-error rule of the restart policy (issue 9 item 2), pure: the same diagnosed
start-up failure twice in a row gives up at once; anything else follows the budget."""

from __future__ import annotations

from inferactors import RestartPolicy, RestartType, StopReason
from inferactors._policy.restart import CONFIG_ERROR, GiveUp, NoRestart, Restart, RestartBudget
from inferactors._stop_reasons import Diagnosis, FaultKind

POLICY = RestartPolicy(max_restarts=5, base_s=1.0, cap_s=8.0, jitter=0.0)
FLAG = Diagnosis(FaultKind.INVALID_FLAG, "error: invalid argument: --no-such-flag")
OOM = Diagnosis(FaultKind.OUT_OF_MEMORY, "ggml_aligned_malloc: insufficient memory")
START_FAILED = StopReason.STARTUP_FAILURE


def decide(
    budget: RestartBudget, reason: StopReason, diagnosis: Diagnosis | None, now: float
) -> tuple[RestartBudget, Restart | GiveUp | NoRestart]:
    return budget.decide(reason=reason, exit_code=1, signal=None, now=now, diagnosis=diagnosis)


def test_the_same_start_up_failure_twice_in_a_row_is_a_config_error() -> None:
    budget, first = decide(RestartBudget(POLICY), START_FAILED, FLAG, 0.0)
    assert first == Restart(attempt=1, delay_s=1.0)
    budget, second = decide(budget, START_FAILED, FLAG, 1.0)
    assert second == GiveUp(
        attempts=1, why="config-error: invalid flag: error: invalid argument: --no-such-flag"
    )
    assert second.why.startswith(f"{CONFIG_ERROR}: ")


def test_the_same_kind_with_other_words_is_still_the_same_failure() -> None:
    other = Diagnosis(FaultKind.INVALID_FLAG, "error: invalid argument: --mlock")
    budget, _ = decide(RestartBudget(POLICY), START_FAILED, FLAG, 0.0)
    _, second = decide(budget, START_FAILED, other, 1.0)
    assert isinstance(second, GiveUp)
    assert second.why == f"config-error: {other.describe()}"


def test_two_different_kinds_are_restarted() -> None:
    budget, _ = decide(RestartBudget(POLICY), START_FAILED, FLAG, 0.0)
    budget, second = decide(budget, START_FAILED, OOM, 1.0)
    assert second == Restart(attempt=2, delay_s=2.0)
    _, third = decide(budget, START_FAILED, OOM, 3.0)
    assert isinstance(third, GiveUp)  # OOM twice in a row now
    assert third.why == f"config-error: {OOM.describe()}"


def test_a_crash_in_between_clears_the_memory() -> None:
    budget, _ = decide(RestartBudget(POLICY), START_FAILED, FLAG, 0.0)
    budget, crash = decide(budget, StopReason.CRASH, OOM, 1.0)  # after Running: a crash
    assert isinstance(crash, Restart)
    _, again = decide(budget, START_FAILED, FLAG, 3.0)
    assert again == Restart(attempt=3, delay_s=4.0)


def test_crashes_with_the_same_diagnosis_follow_the_restart_policy() -> None:
    budget = RestartBudget(POLICY)
    for attempt in range(1, 6):
        budget, decision = decide(budget, StopReason.CRASH, OOM, 100.0 * attempt)
        assert isinstance(decision, Restart)
        assert decision.attempt == attempt
    _, last = decide(budget, StopReason.CRASH, OOM, 1000.0)
    assert last == GiveUp(attempts=5, why=f"restart budget spent (5 of 5); last: {OOM.describe()}")


def test_an_undiagnosed_start_up_crash_and_a_signal_follow_the_restart_policy() -> None:
    budget, first = decide(RestartBudget(POLICY), StopReason.CRASH, None, 0.0)
    budget, second = decide(budget, StopReason.CRASH, None, 1.0)
    assert (first, second) == (Restart(1, 1.0), Restart(2, 2.0))
    _, killed = budget.decide(reason=StopReason.CRASH, exit_code=None, signal=9, now=3.0)
    assert killed == Restart(3, 4.0)


def test_a_start_up_failure_is_abnormal_and_reset_forgets_it() -> None:
    transient = RestartPolicy(restart_type=RestartType.TRANSIENT, jitter=0.0)
    budget, first = RestartBudget(transient).decide(
        reason=START_FAILED, exit_code=0, signal=None, now=0.0, diagnosis=FLAG
    )
    assert isinstance(first, Restart)  # abnormal even with status 0
    assert budget.last_fault == FLAG
    _, again = decide(budget.reset(), START_FAILED, FLAG, 1.0)
    assert isinstance(again, Restart)


def test_an_unclassified_start_up_crash_twice_alike_is_a_config_error_in_its_words() -> None:
    said = ("loading", "error: something is wrong with this model")
    budget, first = RestartBudget(POLICY).decide(
        reason=StopReason.CRASH, exit_code=1, signal=None, now=0.0, last_lines=said
    )
    assert first == Restart(1, 1.0)
    _, second = budget.decide(
        reason=StopReason.CRASH, exit_code=1, signal=None, now=1.0, last_lines=said
    )
    assert second == GiveUp(
        1,
        "config-error: the same failure twice at start: exit status 1: "
        "error: something is wrong with this model",
    )


def test_unclassified_crashes_unlike_or_after_being_up_follow_the_budget() -> None:
    said = ("error: something is wrong",)
    budget, _ = RestartBudget(POLICY).decide(
        reason=StopReason.CRASH, exit_code=1, signal=None, now=0.0, last_lines=said
    )
    budget, other_status = budget.decide(
        reason=StopReason.CRASH, exit_code=2, signal=None, now=1.0, last_lines=said
    )
    assert other_status == Restart(2, 2.0)
    budget = budget.note_running(2.0)  # it served a while: a crash, not a start failure
    budget, after_up = budget.decide(
        reason=StopReason.CRASH, exit_code=2, signal=None, now=3.0, last_lines=said
    )
    assert after_up == Restart(3, 4.0)
    budget, _ = budget.decide(
        reason=StopReason.CRASH, exit_code=2, signal=None, now=9.0, last_lines=("other",)
    )
    budget, _ = budget.decide(
        reason=StopReason.CRASH, exit_code=2, signal=None, now=20.0, last_lines=("third",)
    )
    _, spent = budget.decide(
        reason=StopReason.CRASH, exit_code=2, signal=None, now=40.0, last_lines=("fourth",)
    )
    assert spent == GiveUp(5, "restart budget spent (5 of 5); last: exit status 2: fourth")
