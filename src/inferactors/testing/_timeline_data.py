"""Timelines written as data: TOML, JSON or a parsed mapping, through the one converter.

The form (TOML shown; JSON is the same tree)::

    [[steps]]
    fault = "status_503"
    for_s = 5.0

    [[steps]]
    fault = "crash_at"
    request = 3

``fault`` names the step in snake case (``Status503`` is ``status_503``, ``CrashAt`` is
``crash_at``; `FAULT_NAMES` lists them); the other keys are the step's fields. Each step
goes through inferactors' one cattrs converter (strict types, unknown keys refused), so bad
input raises `InvalidConfig` whose message starts with the path of the field, e.g.
``$.steps[1].request: expected int, got string`` or ``$.steps[0].for_s: must be >= 0, got
-1.0``; two steps that contradict name the second (``$.steps[1]: Status503 contradicts
$.steps[0] ...``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from .._config.convert_hooks import converter, describe_error
from .._errors import InvalidConfig
from ._step_checks import StepFieldError
from ._timeline import OLLAMA_STEPS, SERVER_STEPS, Step, Timeline


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace("status503", "status_503")


FAULT_NAMES: dict[str, type[Any]] = {
    _snake(step.__name__): step for step in (*SERVER_STEPS, *OLLAMA_STEPS)
}
"""Every step by its name in data: ``{"status_503": Status503, "crash_at": CrashAt, ...}``."""


def timeline_from_data(data: object) -> Timeline:
    """A timeline from parsed TOML or JSON: ``{"steps": [{"fault": ..., ...}, ...]}``.

    Raises:
        InvalidConfig: not that shape, an unknown fault name, an unknown key, a mistyped
            or invalid field; the message starts with the path (``$.steps[0].for_s``).
    """
    if not isinstance(data, Mapping):
        raise InvalidConfig("$: expected a table with a steps array")
    extra = sorted(set(data) - {"steps"})
    if extra:
        raise InvalidConfig(f"$.{extra[0]}: unknown key (a timeline has only steps)")
    steps = data.get("steps", [])
    if not isinstance(steps, list):
        raise InvalidConfig("$.steps: expected an array of tables")
    return Timeline(tuple(_step(item, f"$.steps[{index}]") for index, item in enumerate(steps)))


def timeline_from_toml(text: str) -> Timeline:
    """`timeline_from_data` of TOML text; a syntax error is `InvalidConfig` too."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidConfig(f"timeline TOML: {error}") from None
    return timeline_from_data(data)


def timeline_from_json(text: str) -> Timeline:
    """`timeline_from_data` of JSON text; a syntax error is `InvalidConfig` too."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InvalidConfig(f"timeline JSON: {error}") from None
    return timeline_from_data(data)


def timeline_to_data(timeline: Timeline) -> dict[str, Any]:
    """The data form of ``timeline`` (fields at their defaults left out);
    `timeline_from_data` reads it back to an equal timeline."""
    steps = [
        {"fault": _snake(type(step).__name__), **converter.unstructure(step)}
        for step in timeline.steps
    ]
    return {"steps": steps}


def _step(item: object, path: str) -> Step:
    if not isinstance(item, Mapping):
        raise InvalidConfig(f"{path}: expected a table with a fault key")
    name = item.get("fault")
    kind = FAULT_NAMES.get(name) if isinstance(name, str) else None
    if kind is None:
        known = ", ".join(sorted(FAULT_NAMES))
        raise InvalidConfig(f"{path}.fault: expected one of {known}, got {json.dumps(name)}")
    fields = {key: value for key, value in item.items() if key != "fault"}
    try:
        step: Step = converter.structure(fields, kind)
    except Exception as error:
        own = _own_check(error)
        if own is not None:  # one of the step's own checks (``_step_checks``)
            where = path if own.field is None else f"{path}.{own.field}"
            raise InvalidConfig(f"{where}: {own.reason}") from None
        lines = describe_error(error, path)
        raise InvalidConfig("; ".join(lines)) from None
    return step


def _own_check(error: BaseException) -> StepFieldError | None:
    """The `StepFieldError` in ``error`` (the converter wraps it in an exception group)."""
    if isinstance(error, StepFieldError):
        return error
    for inner in error.exceptions if isinstance(error, BaseExceptionGroup) else ():
        if (found := _own_check(inner)) is not None:
            return found
    return None
