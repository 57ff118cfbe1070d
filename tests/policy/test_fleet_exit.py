"""Whether anything is left to supervise (`_policy/fleet_exit`), instance by instance."""

from __future__ import annotations

import pytest

from inferactors._config.supervision import RestartPolicy, RestartType
from inferactors._policy.fleet_exit import (
    EXIT_CONFIG,
    EXIT_NOTHING_LEFT,
    DownKind,
    Place,
    Standing,
    adopted_retry_delay_s,
    down_kind,
    down_reason,
    nothing_left,
    settled,
    standing,
    verdict,
)
from inferactors._status import InstanceState, InstanceStatus

S = InstanceState
DOWN, UP, STARTING = Standing.DOWN, Standing.SUPERVISED, Standing.STARTING


@pytest.mark.parametrize(
    ("status", "refused", "retrying", "expected"),
    [
        (InstanceStatus(S.RUNNING), None, False, UP),
        (InstanceStatus(S.DEGRADED, "slow: first token in 12 s"), None, False, UP),
        (InstanceStatus(S.DEGRADED, "loading model"), None, False, STARTING),
        (InstanceStatus(S.DEGRADED, "starting: not listening yet"), None, False, STARTING),
        (InstanceStatus(S.LOADED), None, False, STARTING),
        (InstanceStatus(S.EXITED, stop_reason="crash", supervision="restarting in 2 s"), None,
         False, UP),
        (InstanceStatus(S.EXITED, stop_reason="crash"), None, False, UP),  # not final yet
        (InstanceStatus(S.EXITED, stop_reason="requested"), None, False, UP),  # operator's
        (InstanceStatus(S.EXITED, supervision="gave up: restart budget spent (5 of 5)"), None,
         False, DOWN),
        (InstanceStatus(S.EXITED, supervision="gave up: config-error: invalid flag"), None,
         False, DOWN),
        (InstanceStatus(S.EXITED, stop_reason="exposure"), None, False, DOWN),
        (InstanceStatus(S.EXITED, stop_reason="tampered"), None, False, DOWN),
        (InstanceStatus(S.EXITED, "unknown model"), "admission-refused: unknown model", False,
         DOWN),
        (InstanceStatus(S.EXITED, "not reachable"), None, True, UP),  # adopted, retried
    ],
)  # fmt: skip
def test_standing(
    status: InstanceStatus, refused: str | None, retrying: bool, expected: Standing
) -> None:
    assert standing(status, refused, retrying) is expected


def test_nothing_left_only_when_every_instance_is_down() -> None:
    assert nothing_left([DOWN, DOWN])
    assert not nothing_left([DOWN, UP])
    assert not nothing_left([DOWN, STARTING])


def test_settled_once_none_is_starting() -> None:
    assert settled([UP, DOWN])
    assert not settled([UP, STARTING])


def test_an_adopted_server_is_retried_under_its_policy() -> None:
    policy = RestartPolicy(max_restarts=3, base_s=0.5, cap_s=1.5)
    assert [adopted_retry_delay_s(policy, n) for n in range(4)] == [0.5, 1.0, 1.5, None]
    temporary = RestartPolicy(restart_type=RestartType.TEMPORARY)
    assert adopted_retry_delay_s(temporary, 0) is None


def test_down_reason_says_why_in_words() -> None:
    refused = down_reason(InstanceStatus(S.EXITED, "x"), "admission-refused: port held")
    assert refused == "refused: admission-refused: port held"
    gave_up = InstanceStatus(S.EXITED, supervision="gave up after 2 restart(s): budget spent")
    assert down_reason(gave_up) == "gave up after 2 restart(s): budget spent"
    tampered = InstanceStatus(S.EXITED, stop_reason="tampered")
    assert down_reason(tampered) == "held down after a stop for tampered"
    assert down_reason(InstanceStatus(S.EXITED, "server process exited")) == (
        "exited: server process exited"
    )


CONFIG, FAILURE = DownKind.CONFIG, DownKind.FAILURE


@pytest.mark.parametrize(
    ("status", "refused", "kind"),
    [
        (InstanceStatus(S.EXITED), "admission-refused: something already holds port 8090", CONFIG),
        (InstanceStatus(S.EXITED), "model: pin mismatch", CONFIG),
        (InstanceStatus(S.EXITED), "gave up: not reachable after 3 retries", FAILURE),
        (InstanceStatus(S.EXITED, supervision="gave up: config-error: invalid flag"), None, CONFIG),
        (InstanceStatus(S.EXITED, supervision="gave up: restart budget spent (5 of 5)"), None,
         FAILURE),
        (InstanceStatus(S.EXITED, stop_reason="tampered"), None, CONFIG),
        (InstanceStatus(S.EXITED, stop_reason="exposure"), None, CONFIG),
    ],
)  # fmt: skip
def test_down_kind(status: InstanceStatus, refused: str | None, kind: DownKind) -> None:
    assert down_kind(status, refused) is kind


def test_the_verdict_waits_for_required_instances_and_says_whether_a_restart_helps() -> None:
    up, crashed, tampered = Place(UP), Place(DOWN, kind=FAILURE), Place(DOWN, kind=CONFIG)
    optional_down = Place(DOWN, required=False, kind=CONFIG)
    assert verdict([up, Place(UP, required=False)]) is None
    assert verdict([up, optional_down]) is None  # an optional one down: the rest go on
    assert verdict([crashed, Place(UP, required=False)]) == EXIT_NOTHING_LEFT
    assert verdict([tampered, up]) == EXIT_CONFIG  # a restart would only fail again
    assert verdict([tampered, crashed]) == EXIT_CONFIG
    assert verdict([optional_down, Place(DOWN, required=False)]) == EXIT_NOTHING_LEFT
    assert verdict([optional_down, optional_down]) == EXIT_CONFIG
    assert verdict([]) is None
