"""The one converter between parsed config (TOML, JSON) and inferactors' frozen values.

A single cattrs converter, strict about types (no ``"8090"`` for an int, no ``true`` for a
number, no string where a list belongs) and about keys (unknown keys are refused), with the
hooks that make it so, and `describe_error`, which turns its failures into lines that name
the path, e.g. ``$.instances[0].serve.port: expected int, got string``. Reading text and
validating what it yields is `convert`'s job. Unknown keys are refused; fields that are
empty or at their default are left out when serializing.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn
from cattrs.preconf.tomllib import make_converter

from .._errors import cut
from .._flavor import InferFlavor
from .config import ControlMode
from .residency import InstanceResidency
from .runfile import RunInstance
from .spec import InferenceSpec
from .supervision import Supervision

Hook = Callable[[Any, Any], Any]


class _BadValue(ValueError):
    """A leaf structuring failure whose message is ready to show after the path."""


converter = make_converter(forbid_extra_keys=True, omit_if_default=True)
"""The converter every inferactors config goes through (strict types, unknown keys refused,
defaults omitted when unstructuring)."""


# ---- strict leaf hooks ------------------------------------------------------------------


def _kind(obj: object) -> str:
    names = {bool: "bool", int: "int", float: "float", str: "string", list: "list"}
    if isinstance(obj, Mapping):
        return "table"
    if obj is None:
        return "null"
    return names.get(type(obj), type(obj).__name__)


def _expected(what: str, obj: object) -> _BadValue:
    return _BadValue(f"expected {what}, got {_kind(obj)}")


_PLAIN: dict[type[Any], Callable[[Any], Any]] = {int: int.__int__, str: str.__str__}
"""The base types' own copies: a caller's subclass of int or str (whatever it overrides)
becomes a plain value."""


def _strict(cl: type[Any], name: str) -> Hook:
    """Accept exactly ``cl``, as a plain value; a bool is never taken for an int (nor an int
    for a bool)."""
    plain = _PLAIN.get(cl, lambda obj: obj)

    def structure(obj: object, _: Any) -> Any:
        if isinstance(obj, bool) is not (cl is bool) or not isinstance(obj, cl):
            raise _expected(name, obj)
        return plain(obj)

    return structure


def _structure_float(obj: object, _: Any) -> float:
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        raise _expected("number", obj)
    return float(obj)


def _structure_path(obj: object, _: Any) -> Path:
    if not isinstance(obj, str):
        raise _expected("a path string", obj)
    if not obj or "\x00" in obj:
        raise _BadValue("expected a non-empty path without NUL")
    return Path(obj)


def _structure_enum(obj: object, cl: type[enum.Enum]) -> enum.Enum:
    choices = [member.value for member in cl]
    if isinstance(obj, str):
        for member in cl:
            if member.value == obj:
                return member
    shown = json.dumps(cut(obj)) if isinstance(obj, str) else _kind(obj)
    raise _BadValue(f"expected one of {', '.join(json.dumps(c) for c in choices)}, got {shown}")


# ---- containers -------------------------------------------------------------------------


def _plain_value(member: enum.StrEnum) -> str:
    return str(member.value)


def _is_union(cl: Any) -> bool:
    return typing.get_origin(cl) in (typing.Union, types.UnionType)


def _structure_union(obj: object, cl: Any) -> Any:
    members = [m for m in typing.get_args(cl) if m is not type(None)]
    if obj is None and len(members) < len(typing.get_args(cl)):
        return None
    if len(members) == 1:
        return converter.structure(obj, members[0])
    for member in members:
        try:
            return converter.structure(obj, member)
        except _BadValue:
            continue
    names = {str: "string", int: "int", float: "number", bool: "bool"}
    raise _expected(" or ".join(names.get(m, getattr(m, "__name__", str(m))) for m in members), obj)


def _is_homogeneous_tuple(cl: Any) -> bool:
    args = typing.get_args(cl)
    return typing.get_origin(cl) is tuple and len(args) == 2 and args[1] is Ellipsis


def _is_fixed_tuple(cl: Any) -> bool:
    args = typing.get_args(cl)
    return typing.get_origin(cl) is tuple and Ellipsis not in args


def _structure_items(items: list[tuple[Any, Any, Any]], cl: Any) -> list[Any]:
    """Structure ``(index, value, type)`` triples, collecting failures with their index."""
    out: list[Any] = []
    errors: list[Exception] = []
    for index, value, elem in items:
        try:
            out.append(converter.structure(value, elem))
        except Exception as error:
            error.add_note(IterableValidationNote(f"@ index {index!r}", index, elem))
            errors.append(error)
    if errors:
        raise IterableValidationError(f"while structuring {cl!r}", errors, cl)
    return out


def _structure_tuple(obj: object, cl: Any) -> tuple[Any, ...]:
    if not isinstance(obj, list | tuple):
        raise _expected("a list", obj)
    elem = typing.get_args(cl)[0]
    return tuple(_structure_items([(i, v, elem) for i, v in enumerate(obj)], cl))


def _structure_fixed_tuple(obj: object, cl: Any) -> tuple[Any, ...]:
    elems = typing.get_args(cl)
    if not isinstance(obj, list | tuple) or len(obj) != len(elems):
        raise _expected(f"a list of {len(elems)}", obj)
    return tuple(
        _structure_items([(i, v, t) for i, (v, t) in enumerate(zip(obj, elems, strict=True))], cl)
    )


_ENV_PAIRS = tuple[tuple[str, str], ...]
_PROGRAM_PAIRS = tuple[tuple[InferFlavor, Path], ...]
_BYTES_PAIRS = tuple[tuple[str, int], ...]  # residency's accelerators: device -> bytes


def _table_hook(key_type: Any, value_type: Any) -> Hook:
    """Structure a TOML table / JSON object into ``((key, value), ...)`` pairs."""

    def structure(obj: object, cl: Any) -> tuple[tuple[Any, Any], ...]:
        if not isinstance(obj, Mapping):
            raise _expected("a table", obj)
        keys = [(k, k, key_type) for k in obj]
        values = [(k, v, value_type) for k, v in obj.items()]
        out = _structure_items(keys + values, cl)
        return tuple(zip(out[: len(keys)], out[len(keys) :], strict=True))

    return structure


def _unstructure_pairs(pairs: tuple[tuple[Any, Any], ...]) -> dict[str, Any]:
    return {converter.unstructure(k): converter.unstructure(v) for k, v in pairs}


# ---- attrs classes ----------------------------------------------------------------------


def _attrs_hook(cl: Any) -> Hook:
    inner = make_dict_structure_fn(cl, converter, _cattrs_forbid_extra_keys=True)

    def structure(obj: object, _: Any) -> Any:
        if not isinstance(obj, Mapping):
            raise _expected("a table", obj)
        return inner(obj, cl)

    return structure


def _structure_run_instance(obj: object, _: Any) -> RunInstance:
    """``[[instances]]`` is flat: ``mode``, ``supervision`` and ``required`` sit beside
    the spec's own keys."""
    if not isinstance(obj, Mapping):
        raise _expected("a table", obj)
    errors: list[Exception] = []
    mode: Any = None
    try:
        mode = converter.structure(obj["mode"], ControlMode)
    except Exception as error:
        error.add_note(AttributeValidationNote("mode", "mode", ControlMode))
        errors.append(error)
    supervision: Any = _table_of(obj, "supervision", Supervision, errors)
    residency: Any = _table_of(obj, "residency", InstanceResidency, errors)
    required: Any = True
    if "required" in obj:
        try:
            required = converter.structure(obj["required"], bool)
        except Exception as error:
            error.add_note(AttributeValidationNote("required", "required", bool))
            errors.append(error)
    own = ("mode", "supervision", "residency", "required")
    rest = {k: v for k, v in obj.items() if k not in own}
    try:
        spec = converter.structure(rest, InferenceSpec)
    except ClassValidationError as error:
        errors.extend(error.exceptions)
    except Exception as error:
        errors.append(error)
    if errors:
        raise ClassValidationError("while structuring RunInstance", errors, RunInstance)
    return RunInstance(
        mode=mode, spec=spec, supervision=supervision, residency=residency, required=required
    )


def _table_of(obj: Mapping[str, Any], key: str, cl: type[Any], errors: list[Exception]) -> Any:
    """The optional table ``obj[key]`` as ``cl`` (its default when absent); a failure is
    added to ``errors`` with the key's note."""
    if key not in obj:
        return cl()
    try:
        return converter.structure(obj[key], cl)
    except Exception as error:
        error.add_note(AttributeValidationNote(key, key, cl))
        errors.append(error)
        return cl()


def _unstructure_run_instance(instance: RunInstance) -> dict[str, Any]:
    data = {"mode": instance.mode.value, **converter.unstructure(instance.spec)}
    if instance.supervision != Supervision():
        data["supervision"] = converter.unstructure(instance.supervision)
    if instance.residency != InstanceResidency():
        data["residency"] = converter.unstructure(instance.residency)
    if not instance.required:
        data["required"] = False
    return data


def _is_exactly(expected: Any) -> Callable[[Any], bool]:
    def predicate(cl: Any) -> bool:
        return bool(cl == expected)

    return predicate


def _install() -> None:
    conv = converter
    for cl, name in [(int, "int"), (str, "string"), (bool, "bool")]:
        conv.register_structure_hook(cl, _strict(cl, name))
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(Path, _structure_path)
    conv.register_unstructure_hook(Path, str)
    conv.register_structure_hook(enum.Enum, _structure_enum)
    # A string enum is a str too: its own hooks come first in its MRO, so a value is checked
    # against the members (not taken as any string) and written as its plain value.
    conv.register_structure_hook(enum.StrEnum, _structure_enum)
    conv.register_unstructure_hook(enum.StrEnum, _plain_value)
    conv.register_structure_hook_factory(attrs.has, _attrs_hook)
    conv.register_structure_hook_func(_is_union, _structure_union)
    conv.register_structure_hook_func(_is_fixed_tuple, _structure_fixed_tuple)
    conv.register_structure_hook_func(_is_homogeneous_tuple, _structure_tuple)
    tables = [(_ENV_PAIRS, str, str), (_PROGRAM_PAIRS, InferFlavor, Path), (_BYTES_PAIRS, str, int)]
    for pairs, key, value in tables:
        conv.register_structure_hook_func(_is_exactly(pairs), _table_hook(key, value))
        conv.register_unstructure_hook_func(_is_exactly(pairs), _unstructure_pairs)
    conv.register_structure_hook(RunInstance, _structure_run_instance)
    conv.register_unstructure_hook(RunInstance, _unstructure_run_instance)


_install()


# ---- error messages ---------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHOWN_KEY_CHARS = 40


def _key_path(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if _IDENTIFIER.fullmatch(text) and len(text) <= _SHOWN_KEY_CHARS:
        return f"{path}.{text}"
    return f"{path}[{json.dumps(cut(text, _SHOWN_KEY_CHARS))}]"


def describe_error(error: BaseException, path: str = "$") -> list[str]:
    """Flatten a structuring failure into ``"<path>: <problem>"`` lines, one per leaf."""
    if isinstance(error, ClassValidationError):
        with_notes, without = error.group_exceptions()
        pairs = [(sub, _key_path(path, note.name)) for sub, note in with_notes]
    elif isinstance(error, IterableValidationError):
        with_index, without = error.group_exceptions()
        pairs = [(sub, _key_path(path, note.index)) for sub, note in with_index]
    else:
        return [_describe_leaf(error, path)]
    pairs += [(sub, path) for sub in without]
    return [line for sub, sub_path in pairs for line in describe_error(sub, sub_path)]


def _describe_leaf(error: BaseException, path: str) -> str:
    if isinstance(error, ForbiddenExtraKeysError):
        keys = sorted(error.extra_fields)
        names = ", ".join(_key_path(path, key) for key in keys)
        return f"{names}: unknown key{'s' if len(keys) > 1 else ''}"
    if isinstance(error, KeyError):
        return f"{path}: required key missing"
    if isinstance(error, _BadValue):
        return f"{path}: {error}"
    return f"{path}: invalid value ({cut(str(error))})"
