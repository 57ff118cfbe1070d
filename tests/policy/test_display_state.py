# ruff: noqa: E501  (one case per line: the table reads as a table)
"""The display states an operator can act on (issue 19 item 3): one table, every row a
case of what the supervisor knows, read by `display_state` alone."""

from __future__ import annotations

from typing import Any

import pytest

from inferactors._policy.service_status import DisplayState, display_state
from inferactors._status import InstanceState, InstanceStatus

LOADED, RUNNING, DEGRADED, EXITED, UNKNOWN = (
    InstanceState.LOADED,
    InstanceState.RUNNING,
    InstanceState.DEGRADED,
    InstanceState.EXITED,
    InstanceState.UNKNOWN,
)
D = DisplayState

# (what is known, the state shown): status fields, then display_state's keywords.
TABLE: list[tuple[str, dict[str, Any], dict[str, Any], DisplayState]] = [
    ("the fleet loads it", {"state": LOADED, "detail": "loading"}, {}, D.STARTING),
    ("loaded, not started yet", {"state": LOADED}, {}, D.STARTING),
    ("spawned, not listening", {"state": DEGRADED, "detail": "starting: not listening yet"}, {}, D.STARTING),
    ("the model loads", {"state": DEGRADED, "detail": "loading model"}, {}, D.STARTING),
    ("a normal start, first token", {"state": DEGRADED, "detail": "starting: waiting for a first token"}, {}, D.STARTING),
    ("up", {"state": RUNNING, "detail": "server up"}, {}, D.RUNNING),
    ("busy but serving", {"state": RUNNING, "detail": "busy: no slot free"}, {}, D.RUNNING),
    ("slow", {"state": DEGRADED, "detail": "slow: first token in 12.0 s", "serving": True}, {}, D.DEGRADED),
    ("its model not listed", {"state": DEGRADED, "detail": "model tiny is not listed by the server"}, {}, D.DEGRADED),
    ("crashed, restart pending", {"state": EXITED, "stop_reason": "crash", "exit_code": 1, "supervision": "restarting in 2.0 s (attempt 1)"}, {}, D.BACKOFF),
    ("a restart spawned again", {"state": DEGRADED, "detail": "starting: not listening yet", "supervision": "restarting in 2.0 s (attempt 1)"}, {}, D.BACKOFF),
    ("an operator's stop", {"state": EXITED, "detail": "stopped on request", "stop_reason": "requested"}, {}, D.STOPPED),
    ("stopped by a reload", {"state": EXITED, "stop_reason": "reload"}, {}, D.STOPPED),
    ("a clean exit nothing restarts", {"state": EXITED, "stop_reason": "crash", "exit_code": 0}, {}, D.STOPPED),
    ("a stop under way", {"state": RUNNING, "pid": 7}, {"stopping": True}, D.STOPPING),
    ("a stop under way, in backoff", {"state": EXITED, "supervision": "restarting in 1.0 s (attempt 2)"}, {"stopping": True}, D.STOPPING),
    ("gave up: budget spent", {"state": EXITED, "stop_reason": "crash", "exit_code": 1, "supervision": "gave up: restart budget spent (5 of 5)"}, {}, D.FATAL),
    ("gave up: config error", {"state": EXITED, "stop_reason": "config-error", "supervision": "gave up: config-error: bad model file"}, {}, D.FATAL),
    ("gave up, a stop asked", {"state": EXITED, "supervision": "gave up: restart budget spent (5 of 5)"}, {"stopping": True}, D.FATAL),
    ("held down: exposure", {"state": EXITED, "stop_reason": "exposure"}, {}, D.FATAL),
    ("held down: tampered", {"state": EXITED, "stop_reason": "tampered"}, {}, D.FATAL),
    ("refused at load", {"state": EXITED, "detail": "unknown-model: tiny"}, {"refused": "unknown-model: tiny"}, D.FATAL),
    ("crashed, temporary: never restarted", {"state": EXITED, "stop_reason": "crash", "exit_code": 1}, {}, D.FATAL),
    ("killed at the readiness deadline", {"state": EXITED, "stop_reason": "readiness timeout"}, {}, D.FATAL),
    ("adopted, up", {"state": RUNNING, "detail": "server up"}, {"adopted": True}, D.RUNNING),
    ("adopted, not answering", {"state": EXITED, "detail": "unreachable (connection refused)"}, {"adopted": True}, D.GONE),
    ("adopted, down at start, retried", {"state": EXITED, "supervision": "not reachable, retrying in 1 s"}, {"adopted": True, "retrying": True}, D.GONE),
    ("adopted, retries spent", {"state": EXITED}, {"adopted": True, "refused": "gave up: not reachable after 3 retries"}, D.FATAL),
    ("adopted, loading", {"state": DEGRADED, "detail": "loading model"}, {"adopted": True}, D.STARTING),
    ("on demand, waits for a request", {"state": LOADED}, {"on_demand": True}, D.IDLE),
    ("on demand, idled out", {"state": EXITED, "stop_reason": "ttl"}, {"on_demand": True}, D.IDLE),
    ("on demand, evicted", {"state": EXITED, "stop_reason": "evicted"}, {"on_demand": True}, D.IDLE),
    ("on demand, crashed while idle: a request starts it", {"state": EXITED, "stop_reason": "crash", "exit_code": -9}, {"on_demand": True}, D.IDLE),
    ("on demand, crashed, given up", {"state": EXITED, "stop_reason": "crash", "exit_code": 1, "supervision": "gave up: restart budget spent (5 of 5)"}, {"on_demand": True}, D.FATAL),
    ("on demand, held down", {"state": EXITED, "stop_reason": "tampered"}, {"on_demand": True}, D.FATAL),
    ("on demand, stopped by an operator", {"state": EXITED, "stop_reason": "requested"}, {"on_demand": True}, D.STOPPED),
    ("on demand, being loaded", {"state": LOADED, "detail": "loading"}, {"on_demand": True}, D.STARTING),
    ("an Ollama model not resident", {"state": LOADED, "detail": "model not resident"}, {}, D.IDLE),
    ("the runtime closed", {"state": UNKNOWN, "detail": "the runtime is closed"}, {}, D.UNKNOWN),
]  # fmt: skip


@pytest.mark.parametrize(("case", "status", "known", "shown"), TABLE, ids=[row[0] for row in TABLE])
def test_each_case_reads_as_the_state_an_operator_acts_on(
    case: str, status: dict[str, Any], known: dict[str, Any], shown: DisplayState
) -> None:
    assert display_state(InstanceStatus(**status), **known) is shown


def test_every_display_state_is_reached_by_some_case() -> None:
    assert {row[3] for row in TABLE} == set(DisplayState)


def test_a_normal_start_never_reads_degraded() -> None:
    """A start's every stage, as the instance reports it, reads starting, then running."""
    stages = [
        InstanceStatus(LOADED, "loading"),
        InstanceStatus(DEGRADED, "starting: not listening yet"),
        InstanceStatus(DEGRADED, "loading model"),
        InstanceStatus(DEGRADED, "starting: confirming the listener is ours"),
        InstanceStatus(DEGRADED, "starting: waiting for a first token"),
        InstanceStatus(RUNNING, "server up"),
    ]
    shown = [display_state(status) for status in stages]
    assert shown == [D.STARTING] * 5 + [D.RUNNING]
