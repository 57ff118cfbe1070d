"""docs/control-api.md says what the app serves: every route is documented, every JSON and
NDJSON example parses, and every error code the app can answer is in its table."""

from __future__ import annotations

import json
import re
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Route

from inferactors import _errors as errors
from inferactors._errors import InferactorsError
from inferactors._service.control_app import ERROR_STATUS, control_app
from service.control_support import FakeFleet

DOC = Path(__file__).parents[2] / "docs" / "control-api.md"
BLOCK = re.compile(r"```(json|ndjson)\n(.*?)```", re.DOTALL)


def test_every_route_is_documented() -> None:
    app = control_app(FakeFleet())
    assert isinstance(app, Starlette)
    text = DOC.read_text()
    paths = [route.path for route in app.routes if isinstance(route, Route)]
    assert len(paths) == 14
    for path in paths:
        assert f"`{path}" in text, path


def test_every_example_parses() -> None:
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) >= 7
    for kind, body in blocks:
        items = body.splitlines() if kind == "ndjson" else [body]
        for item in items:
            json.loads(item)


def test_every_error_code_is_in_the_table() -> None:
    text = DOC.read_text()
    tree = [cl for cl in vars(errors).values() if isinstance(cl, type)]
    raised = {cl.code for cl in tree if issubclass(cl, InferactorsError)}
    assert {cl.code for cl, _ in ERROR_STATUS} <= raised
    codes = raised | {"unauthorized", "not-found", "method-not-allowed", "internal"}
    for code in codes:
        assert f"`{code}`" in text, code


def test_the_instance_view_example_holds_every_field() -> None:
    """The documented `InstanceView` has exactly the fields the API answers (its status's
    too), and every display state is in the table."""
    from inferactors._config.convert_api import api_data
    from inferactors._policy.service_status import DisplayState
    from service.control_support import running

    text = DOC.read_text()
    shown = json.loads(text.split("### InstanceView\n\n```json\n", 1)[1].split("```", 1)[0])
    answered = api_data(running("chat", 1))
    assert set(shown) == set(answered)
    assert set(shown["status"]) == set(answered["status"])
    for state in DisplayState:
        assert f"| `{state.value}` |" in text, state
