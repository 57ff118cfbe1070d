"""The one converter between config text (TOML, JSON) and inferactors' frozen values.

A single cattrs converter, strict about types (no ``"8090"`` for an int, no ``true`` for a
number, no string where a list belongs) and about keys (unknown keys are refused), turns
parsed TOML or JSON into `InferenceSpec` and `RunConfig`. Every failure is `InvalidConfig`
whose message names the path, e.g. ``$.instances[0].serve.port: expected int, got string``;
a syntax error names the line. Structured specs and run files are then ``validate()``d.
Source: style.md (one converter, transform_error-style paths); seed-behaviour.md section 1
(unknown keys refused; empty and default fields skipped when serializing).
"""

from __future__ import annotations

import enum
import json
import re
import tomllib
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

from ._config import ControlMode, RunConfig, RunInstance, Supervision
from ._errors import InvalidConfig
from ._flavor import InferFlavor
from ._spec import InferenceSpec

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


def _strict(cl: type[Any], name: str) -> Hook:
    """Accept exactly ``cl``; a bool is never taken for an int (nor an int for a bool)."""

    def structure(obj: object, _: Any) -> Any:
        if isinstance(obj, bool) is not (cl is bool) or not isinstance(obj, cl):
            raise _expected(name, obj)
        return obj

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
    shown = json.dumps(obj) if isinstance(obj, str) else _kind(obj)
    raise _BadValue(f"expected one of {', '.join(json.dumps(c) for c in choices)}, got {shown}")


# ---- containers -------------------------------------------------------------------------


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
    """``[[instances]]`` is flat: ``mode`` sits beside the spec's own keys."""
    if not isinstance(obj, Mapping):
        raise _expected("a table", obj)
    errors: list[Exception] = []
    mode: Any = None
    try:
        mode = converter.structure(obj["mode"], ControlMode)
    except Exception as error:
        error.add_note(AttributeValidationNote("mode", "mode", ControlMode))
        errors.append(error)
    supervision: Any = Supervision()
    if "supervision" in obj:
        try:
            supervision = converter.structure(obj["supervision"], Supervision)
        except Exception as error:
            error.add_note(AttributeValidationNote("supervision", "supervision", Supervision))
            errors.append(error)
    rest = {k: v for k, v in obj.items() if k not in ("mode", "supervision")}
    try:
        spec = converter.structure(rest, InferenceSpec)
    except ClassValidationError as error:
        errors.extend(error.exceptions)
    except Exception as error:
        errors.append(error)
    if errors:
        raise ClassValidationError("while structuring RunInstance", errors, RunInstance)
    return RunInstance(mode=mode, spec=spec, supervision=supervision)


def _unstructure_run_instance(instance: RunInstance) -> dict[str, Any]:
    data = {"mode": instance.mode.value, **converter.unstructure(instance.spec)}
    if instance.supervision != Supervision():
        data["supervision"] = converter.unstructure(instance.supervision)
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
    conv.register_structure_hook_factory(attrs.has, _attrs_hook)
    conv.register_structure_hook_func(_is_union, _structure_union)
    conv.register_structure_hook_func(_is_fixed_tuple, _structure_fixed_tuple)
    conv.register_structure_hook_func(_is_homogeneous_tuple, _structure_tuple)
    for pairs, key, value in [(_ENV_PAIRS, str, str), (_PROGRAM_PAIRS, InferFlavor, Path)]:
        conv.register_structure_hook_func(_is_exactly(pairs), _table_hook(key, value))
        conv.register_unstructure_hook_func(_is_exactly(pairs), _unstructure_pairs)
    conv.register_structure_hook(RunInstance, _structure_run_instance)
    conv.register_unstructure_hook(RunInstance, _unstructure_run_instance)


_install()


# ---- error messages ---------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _key_path(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    return f"{path}.{text}" if _IDENTIFIER.fullmatch(text) else f"{path}[{json.dumps(text)}]"


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
    return f"{path}: invalid value ({error})"


def _structure_or_refuse(data: object, cl: type[Any], source: str) -> Any:
    try:
        return converter.structure(data, cl)
    except InvalidConfig:
        raise
    except Exception as error:
        lines = describe_error(error)
        summary = lines[0] if len(lines) == 1 else f"{len(lines)} problems: " + "; ".join(lines)
        raise InvalidConfig(f"{source}{summary}") from None


def _validated_spec(spec: InferenceSpec, source: str) -> InferenceSpec:
    try:
        spec.validate()
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}$.{error}") from None
    return spec


# ---- public entry points ----------------------------------------------------------------


def spec_from_dict(data: object) -> InferenceSpec:
    """Structure and validate a spec from parsed TOML or JSON (a mapping).

    Raises:
        InvalidConfig: an unknown key, a missing or mistyped field, or a broken rule of
            `InferenceSpec.validate`; the message starts with the path (``$.serve.port``).
    """
    spec = _structure_or_refuse(data, InferenceSpec, "")
    return _validated_spec(spec, "")


def spec_from_toml(text: str) -> InferenceSpec:
    """Parse a spec from TOML text (top-level keys, ``[serve]`` and ``[memory]`` tables).

    Raises:
        InvalidConfig: a TOML syntax error (the message names line and column) or as
            `spec_from_dict`.
    """
    return spec_from_dict(_parse_toml(text, ""))


def spec_from_json(text: str) -> InferenceSpec:
    """Parse a spec from a JSON object.

    Raises:
        InvalidConfig: a JSON syntax error (with line and column), a duplicate key, or as
            `spec_from_dict`.
    """
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as error:
        raise InvalidConfig(
            f"JSON syntax error at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    return spec_from_dict(data)


def spec_to_json(spec: InferenceSpec) -> str:
    """Serialize a spec to compact JSON, leaving out every field that is None, empty or at
    its default (so ``spec_from_json(spec_to_json(s)) == s``)."""
    return json.dumps(converter.unstructure(spec), separators=(",", ":"))


def run_config_from_toml(text: str, base_dir: Path, source: str = "") -> RunConfig:
    """Parse and validate a run file's text; relative paths resolve against ``base_dir``.

    Args:
        text: The TOML text.
        base_dir: Directory relative paths (registry, data_root, serve programs) start from.
        source: Prefix for messages, e.g. ``"run.toml: "``.

    Raises:
        InvalidConfig: a syntax error, an unknown key, a mistyped value or a broken rule;
            the message names the path, e.g. ``$.instances[0].serve.port: expected int``.
    """
    data = _parse_toml(text, source)
    config: RunConfig = _structure_or_refuse(data, RunConfig, source)
    config = _resolve_paths(config, base_dir)
    try:
        config.validate()
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}{error}") from None
    return config


def load_run_config(path: Path) -> RunConfig:
    """Read and validate the run file at ``path`` (see `run_config_from_toml`).

    Raises:
        InvalidConfig: the file cannot be read, or as `run_config_from_toml`; the message
            starts with the file's path.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidConfig(f"{path}: cannot read the run file: {error}") from None
    return run_config_from_toml(text, path.parent, f"{path}: ")


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error).replace(
            "(at end of document)", f"(at end of document, after line {len(text.splitlines())})"
        )
        raise InvalidConfig(f"{source}TOML syntax error: {message}") from None


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise InvalidConfig(f"JSON object has the key {json.dumps(key)} twice")
        result[key] = value
    return result


def _resolve_paths(config: RunConfig, base_dir: Path) -> RunConfig:
    managed = config.managed
    if managed is None:
        return config
    programs = tuple((flavor, base_dir / program) for flavor, program in managed.serve_programs)
    managed = attrs.evolve(
        managed,
        registry=base_dir / managed.registry,
        data_root=base_dir / managed.data_root,
        serve_programs=programs,
    )
    return attrs.evolve(config, managed=managed)
