"""Readiness for ``/readyz`` (`_policy/readiness.py`): a serving instance is ready, and
readiness changes only after observations in a row agree."""

from __future__ import annotations

from inferactors._policy.readiness import READY_AFTER, UNREADY_AFTER, Readiness, serves
from inferactors._status import InstanceState, InstanceStatus

RUNNING = InstanceStatus(InstanceState.RUNNING, "server up", serving=True)
BUSY = InstanceStatus(InstanceState.RUNNING, "busy: no slot available")
SLOW_HEALTH = InstanceStatus(InstanceState.DEGRADED, "not answering: /health", serving=True)
LOADING = InstanceStatus(InstanceState.DEGRADED, "loading model")
CRASHED = InstanceStatus(InstanceState.EXITED, "server process exited", supervision="restarting")


def test_busy_or_slow_but_serving_is_serving() -> None:
    assert serves(RUNNING)
    assert serves(BUSY)
    assert serves(SLOW_HEALTH)
    assert not serves(LOADING)
    assert not serves(CRASHED)


def test_readiness_turns_only_after_observations_in_a_row() -> None:
    readiness = Readiness()
    assert (readiness.ready, readiness.why) == (False, "starting")
    assert readiness.observe(RUNNING) is (READY_AFTER == 1)
    assert readiness.ready
    for _ in range(UNREADY_AFTER - 1):  # a blip: fewer than UNREADY_AFTER in a row
        assert not readiness.observe(LOADING)
    assert readiness.observe(BUSY) is False  # serving again: the streak starts over
    stuck = InstanceStatus(InstanceState.DEGRADED, "not answering: timed out")
    for _ in range(UNREADY_AFTER - 1):
        readiness.observe(stuck)
    assert readiness.ready
    assert readiness.observe(stuck)
    assert (readiness.ready, readiness.why) == (False, "degraded: not answering: timed out")
    readiness.observe(RUNNING)
    assert readiness.ready
    assert readiness.observe(CRASHED)  # gone: at once, nothing left to probe
    assert (readiness.ready, readiness.why) == (
        False,
        "exited: server process exited (restarting)",
    )
    readiness.observe(LOADING)
    assert readiness.why == "degraded: loading model"  # the reason follows the status
    readiness.down("refused: model: no registered model 'x'")
    assert (readiness.ready, readiness.why) == (False, "refused: model: no registered model 'x'")
