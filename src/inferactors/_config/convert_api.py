"""Values as JSON-ready data for the control API, through the one converter.

The run file's converter omits fields at their defaults (a spec serializes to what was
written). The control API's clients want a fixed shape instead: every field of a status, an
event or an instance view present, ``null`` when empty. `api_data` registers, on first use
of an attrs class, an unstructure hook that keeps every field, for that class and every
attrs class its fields hold (``Diagnosis`` inside ``ProcessExited``, ``InstanceStatus``
inside an instance view). Specs never go through it, so their serialization is unchanged.
Enums become their values, tuples lists, paths strings (the converter's own hooks).
"""

from __future__ import annotations

import typing
from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn

from .convert_hooks import converter

_FULL: set[type[Any]] = set()
"""The classes whose every field `api_data` keeps (hooks registered on the converter)."""


def api_data(value: object) -> Any:
    """``value``, an attrs instance, as plain JSON-ready data with every field of every
    attrs class in it present."""
    _keep_every_field(type(value))
    return converter.unstructure(value)


def event_data(event: object) -> dict[str, Any]:
    """An event as ``{"type": "ProcessExited", <every field>}`` (the control API's NDJSON)."""
    data: dict[str, Any] = api_data(event)
    return {"type": type(event).__name__, **data}


def _keep_every_field(cl: Any) -> None:
    """Register full unstructure hooks for ``cl`` and the attrs classes inside its fields
    (through unions, tuples and other generic arguments)."""
    if not isinstance(cl, type) or not attrs.has(cl):
        for arg in typing.get_args(cl):
            _keep_every_field(arg)
        return
    if cl in _FULL:
        return
    _FULL.add(cl)
    for field_type in typing.get_type_hints(cl).values():
        _keep_every_field(field_type)
    hook = make_dict_unstructure_fn(cl, converter, _cattrs_omit_if_default=False)
    converter.register_unstructure_hook(cl, hook)
