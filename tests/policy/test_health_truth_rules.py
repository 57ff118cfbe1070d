"""Issue 9 item 5, the pure rules: what a health reply really says (no I/O, no event loop).

503 bodies are the servers' own (server-apis.md section 1; llama.cpp PR #5548 for the old
"no slot available"; mlx_lm.server 0.32.2's "unavailable"); router bodies follow
llama.cpp ``tools/server/server-models.cpp`` ``get_router_models``.
"""

from __future__ import annotations

import json

import pytest

from inferactors import InstanceState, InvalidConfig, Supervision
from inferactors._config.supervision import SLOW_AFTER_S
from inferactors._policy.exposure import Listener
from inferactors._policy.health_truth import (
    Confirmation,
    confirmed_status,
    health_failure,
    misbound,
    slow_detail,
    worth_confirming,
)
from inferactors._policy.probe_parse import classify_health, read_model_list
from inferactors._policy.probe_report import Busy, Loading, ServerReport, Unhealthy, Unreachable, Up
from inferactors._policy.router_models import RouterModel
from inferactors._policy.status import map_report

LOADING_NEW = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
LOADING_OLD = b'{"status":"loading model"}'
NO_SLOT_OLD = b'{"status":"no slot available","slots_idle":0,"slots_processing":4}'
NO_SLOT_ERROR = b'{"error":{"code":503,"message":"no slot available","type":"unavailable_error"}}'
ALL_BUSY = b'{"error":{"code":503,"message":"All slots are busy","type":"unavailable_error"}}'
MLX_DEAD = b'{"status": "unavailable"}'


@pytest.mark.parametrize("body", [LOADING_NEW, LOADING_OLD, b"", b"<html>503</html>"])
def test_a_503_that_says_loading_or_nothing_is_loading(body: bytes) -> None:
    assert classify_health(503, body) == Loading()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (NO_SLOT_OLD, "no slot available"),
        (NO_SLOT_ERROR, "no slot available"),
        (ALL_BUSY, "All slots are busy"),
        (b'{"status":"ok","slots_idle":0}', "ok"),
    ],
)
def test_a_503_that_says_no_slot_is_busy_not_loading(body: bytes, why: str) -> None:
    assert classify_health(503, body) == Busy(why)


def test_mlx_unavailable_is_unhealthy_and_dead_so_never_confirmed() -> None:
    health = classify_health(503, MLX_DEAD)
    assert isinstance(health, Unhealthy)
    assert health.dead
    assert not worth_confirming(health)


def test_a_busy_server_is_running_with_busy_in_the_detail_never_loading() -> None:
    report = ServerReport(Busy("no slot available"), models=("tiny.gguf",))
    status = map_report(report, model="tiny.gguf", alive=True, adopted=False)
    assert (status.state, status.detail) == (InstanceState.RUNNING, "busy: no slot available")


def test_a_busy_server_that_lists_another_model_is_still_degraded() -> None:
    report = ServerReport(Busy("no slot available"), models=("other.gguf",))
    status = map_report(report, model="tiny.gguf", alive=True, adopted=False)
    assert status.state is InstanceState.DEGRADED


@pytest.mark.parametrize(
    "health", [Unreachable("GET /health: no complete reply within 2 s"), Unhealthy("HTTP 500")]
)
def test_a_failed_health_is_worth_one_completion(health: Unreachable | Unhealthy) -> None:
    assert worth_confirming(health)


@pytest.mark.parametrize("health", [Up(), Busy("no slot"), Loading()])
def test_a_serving_or_loading_health_is_not_confirmed(health: Up | Busy | Loading) -> None:
    assert not worth_confirming(health)
    assert confirmed_status(health, Confirmation(0.0, ttft_s=0.1)) is None


def test_completions_that_work_make_a_hung_health_degraded_saying_both() -> None:
    hung = Unreachable("GET /health: no complete reply within 2 s")
    status = confirmed_status(hung, Confirmation(5.0, ttft_s=0.2))
    assert status is not None
    assert (status.state, status.detail) == (
        InstanceState.DEGRADED,
        "health endpoint not answering (timeout); completions work",
    )


def test_a_confirmation_under_way_says_so_and_one_that_failed_says_nothing() -> None:
    failing = Unhealthy("/health returned HTTP 500")
    pending = confirmed_status(failing, Confirmation(1.0, pending=True))
    assert pending is not None
    assert pending.detail == (
        "health endpoint failing (/health returned HTTP 500); checking with one completion"
    )
    assert confirmed_status(failing, Confirmation(1.0, why="deep health: HTTP 500")) is None
    assert confirmed_status(failing, None) is None


def test_a_reset_health_is_named_by_its_transport_error() -> None:
    reset = Unreachable("GET /health: Server disconnected without sending a response.")
    assert health_failure(reset) == (
        "not answering (GET /health: Server disconnected without sending a response.)"
    )


@pytest.mark.parametrize(
    ("ttft_s", "threshold_s", "detail"),
    [
        (12.34, 10.0, "slow: first token in 12.3 s (threshold 10.0 s)"),
        (10.0, 10.0, None),
        (0.05, 10.0, None),
        (0.6, 0.5, "slow: first token in 0.6 s (threshold 0.5 s)"),
    ],
)
def test_slow_is_strictly_over_the_threshold(
    ttft_s: float, threshold_s: float, detail: str | None
) -> None:
    assert slow_detail(ttft_s, threshold_s) == detail


def test_a_port_on_the_other_family_only_is_that_configuration_error() -> None:
    listeners = [Listener("::1", 8090, 42)]
    assert misbound("127.0.0.1", 8090, listeners) == (
        'listening on [::1]:8090, not 127.0.0.1:8090: set serve.host = "::1"'
    )
    assert misbound("::1", 8090, [Listener("127.0.0.1", 8090, 42)]) == (
        'listening on 127.0.0.1:8090, not [::1]:8090: set serve.host = "127.0.0.1"'
    )


@pytest.mark.parametrize(
    "listeners",
    [
        [],  # nothing listens: still starting
        [Listener("127.0.0.1", 8090, 1), Listener("::1", 8090, 1)],  # both families
        [Listener("::", 8090, 1)],  # dual stack covers 127.0.0.1
        [Listener("::1", 8091, 1)],  # another port
    ],
)
def test_no_configuration_error_when_the_probed_address_is_covered_or_empty(
    listeners: list[Listener],
) -> None:
    assert misbound("127.0.0.1", 8090, listeners) is None


def _router_list(status: dict[str, object]) -> bytes:
    entry = {"id": "tiny", "object": "model", "owned_by": "llamacpp", "status": status}
    other = {"id": "other", "object": "model", "status": {"value": "unloaded", "args": []}}
    return json.dumps({"object": "list", "data": [entry, other]}).encode()


def test_a_router_list_is_read_with_each_models_status() -> None:
    body = _router_list({"value": "unloaded", "args": ["x"], "failed": True, "exit_code": 1})
    ids, problem, router = read_model_list("/v1/models", 200, body)
    assert (ids, problem) == (("tiny", "other"), None)
    assert router == (RouterModel("tiny", "unloaded", True, 1), RouterModel("other", "unloaded"))


def test_a_single_model_list_has_no_router_entries() -> None:
    body = b'{"object":"list","data":[{"id":"tiny.gguf","object":"model","meta":null}]}'
    assert read_model_list("/v1/models", 200, body)[2] == ()


@pytest.mark.parametrize(
    ("status", "state", "detail"),
    [
        (
            {"value": "unloaded", "failed": True, "exit_code": 1},
            InstanceState.DEGRADED,
            "router: model tiny failed to load (its child exited with code 1)",
        ),
        ({"value": "loading"}, InstanceState.DEGRADED, "router: model tiny is loading"),
        ({"value": "loaded"}, InstanceState.RUNNING, "server up"),
        ({"value": "unloaded"}, InstanceState.RUNNING, "server up"),  # loads on first request
    ],
)
def test_a_router_model_whose_child_failed_is_not_running(
    status: dict[str, object], state: InstanceState, detail: str
) -> None:
    ids, problem, router = read_model_list("/v1/models", 200, _router_list(status))
    report = ServerReport(Up(), models=ids, models_problem=problem, router=router)
    mapped = map_report(report, model="tiny", alive=True, adopted=True)
    assert (mapped.state, mapped.detail) == (state, detail)


def test_another_models_failure_does_not_touch_ours() -> None:
    router = (RouterModel("tiny", "loaded"), RouterModel("other", "unloaded", True, 1))
    report = ServerReport(Up(), models=("tiny", "other"), router=router)
    assert map_report(report, model="tiny", alive=True, adopted=True).state is (
        InstanceState.RUNNING
    )


def test_supervision_deep_timeout_and_slow_threshold_are_validated_seconds() -> None:
    assert Supervision().slow_threshold_s == SLOW_AFTER_S == 10.0
    assert Supervision(slow_after_s=2.5).slow_threshold_s == 2.5
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidConfig, match=r"supervision.slow_after_s"):
            Supervision(slow_after_s=bad).validate()
        with pytest.raises(InvalidConfig, match=r"supervision.deep_timeout_s"):
            Supervision(deep_timeout_s=bad).validate()
