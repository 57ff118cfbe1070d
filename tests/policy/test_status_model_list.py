"""Issue 8 item 9, "Truthful": an adopted server that is up but whose ``/v1/models`` reply
cannot be read (a nesting bomb, wrong types, a late or failed reply) has not confirmed our
model, so it is Degraded with the reason in the server's words, never Running "server up".
An empty but valid list, and a server with no list endpoint (404), keep their old mapping.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from inferactors._policy.probe_parse import model_list_problem, parse_model_ids
from inferactors._policy.probe_report import ServerReport, Up
from inferactors._policy.status import map_ollama_report, map_report
from inferactors._status import InstanceState

BOMB = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (200, b'{"object": "list", "data": [{"id": "tiny"}]}', None),
        (200, b'{"object": "list", "data": []}', None),
        (200, b'{"models": [{"name": "q:latest"}]}', None),
        (200, b'{"data": [{"id": 7}, {"id": "ok"}]}', None),
        (404, b"not found", None),
        (
            200,
            BOMB,
            "model list unreadable: /v1/models body is not a JSON object: "
            "JSON nested deeper than 64 levels at line 1, column 65",
        ),
        (
            200,
            b'{"data": [{"id": ["tiny"]}, {"id": {"a": 1}}, null, 3]}',
            'model list unreadable: /v1/models lists no model with a string "id" or "name"',
        ),
        (
            200,
            b'{"data": "tiny"}',
            'model list unreadable: /v1/models lists no model with a string "id" or "name"',
        ),
        (
            200,
            b"",
            "model list unreadable: /v1/models body is not a JSON object: JSON syntax "
            "error at line 1, column 1: Expecting value",
        ),
        (500, b"{}", "model list unreadable: /v1/models returned HTTP 500"),
    ],
)
def test_model_list_problem(status: int, body: bytes, problem: str | None) -> None:
    assert model_list_problem("/v1/models", status, body) == problem


_ID = st.text(max_size=3) | st.integers() | st.none()
_ENTRY = st.fixed_dictionaries({}, optional={"id": _ID, "name": _ID}) | _ID
_LIST = st.lists(_ENTRY, max_size=3) | _ID
_LISTS = st.fixed_dictionaries({}, optional={"data": _LIST, "models": _LIST})


@given(_LISTS)
@example({"data": [{"id": "tiny"}]})
@example({"data": "tiny", "models": [{"name": "q:latest"}]})
@example({"data": [{"id": 7}], "models": [{"name": "q:latest"}]})
def test_a_list_that_names_a_model_has_no_problem(document: dict[str, object]) -> None:
    # The probe asks model_list_problem only when parse_model_ids found no id (one parse
    # per healthy probe, _edges/probe.py _read_list); that is sound only while this holds.
    body = json.dumps(document).encode()
    if parse_model_ids(body):
        assert model_list_problem("/v1/models", 200, body) is None


UNREADABLE = "model list unreadable: GET /v1/models: no complete reply within 1 s"


@pytest.mark.parametrize("adopted", [True, False])
def test_an_unreadable_model_list_is_degraded_with_its_reason(adopted: bool) -> None:
    report = ServerReport(Up(), models_problem=UNREADABLE)
    status = map_report(report, model="tiny", alive=True, adopted=adopted)
    assert (status.state, status.detail) == (InstanceState.DEGRADED, UNREADABLE)


def test_an_empty_valid_list_and_no_model_to_confirm_keep_their_mapping() -> None:
    empty = map_report(ServerReport(Up()), model="tiny", alive=True, adopted=True)
    assert (empty.state, empty.detail) == (InstanceState.RUNNING, "server up")
    unasked = ServerReport(Up(), models_problem=UNREADABLE)
    nothing = map_report(unasked, model=None, alive=True, adopted=True)
    assert nothing.state is InstanceState.RUNNING


def test_a_readable_entry_beside_the_problem_still_counts() -> None:
    report = ServerReport(Up(), models=("tiny",), models_problem=None)
    status = map_report(report, model="tiny", alive=True, adopted=True)
    assert status.state is InstanceState.RUNNING


def test_an_unreadable_ollama_tag_list_is_not_called_not_pulled() -> None:
    why = "model list unreadable: /api/tags body is not a JSON object: ..."
    report = ServerReport(Up(), models_problem=why)
    status = map_ollama_report(report, tag="q:latest", adopted=True)
    assert (status.state, status.detail) == (InstanceState.DEGRADED, why)
