"""The ``STATUS=`` line systemd shows (issue 10 item 8)."""

from __future__ import annotations

from inferactors._policy.service_status import condition, status_line
from inferactors._status import InstanceState, InstanceStatus

RUNNING = InstanceStatus(InstanceState.RUNNING, "server up")
RESTARTING = InstanceStatus(
    InstanceState.EXITED, "server process exited", supervision="restarting in 2.0 s (attempt 1)"
)
GAVE_UP = InstanceStatus(
    InstanceState.EXITED, "failed to start", supervision="gave up: config-error: bad model file"
)
STARTING = InstanceStatus(InstanceState.DEGRADED, "starting: not listening yet")
SLOW = InstanceStatus(InstanceState.DEGRADED, "slow: first token in 12.0 s")


def test_counts_running_of_all_then_the_rest_in_a_fixed_order() -> None:
    line = status_line([(RUNNING, False), (RESTARTING, False), (RUNNING, False), (RUNNING, False)])
    assert line == "3 of 4 running; 1 restarting"
    mixed = [(GAVE_UP, False), (SLOW, False), (STARTING, False), (RUNNING, True)]
    assert status_line(mixed) == "0 of 4 running; 1 starting; 1 degraded; 1 gave up; 1 refused"


def test_no_instances_says_so() -> None:
    assert status_line([]) == "no instances"


def test_each_condition() -> None:
    assert condition(RUNNING) == "running"
    assert condition(RUNNING, refused=True) == "refused"
    assert condition(RESTARTING) == "restarting"
    assert condition(GAVE_UP) == "gave up"
    assert condition(STARTING) == "starting"
    assert condition(InstanceStatus(InstanceState.DEGRADED, "loading model")) == "starting"
    assert condition(SLOW) == "degraded"
    assert condition(InstanceStatus(InstanceState.EXITED, "stopped on request")) == "exited"
    assert condition(InstanceStatus(InstanceState.LOADED)) == "loaded"
