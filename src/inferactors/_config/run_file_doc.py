"""The reference of the run file's keys (``docs/run-file.md``), made from the config classes.

Every table of the run file is an attrs class (`RunConfig` and what it holds); each key is a
field, with its type, its default and one line from the class's documentation (the
attribute's own docstring, or its entry under ``Attributes:`` in the class docstring).
``[[instances]]`` holds the spec's keys flat beside its own (`RunInstance`). Regenerate with
``python -m inferactors._config.run_file_doc > docs/run-file.md``; a test checks the file is
current.
"""

from __future__ import annotations

import ast
import enum
import inspect
import itertools
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from .config import ManagedConfig
from .runfile import ManagedSection, RunConfig, RunInstance
from .spec import InferenceSpec

HEADER = """# The run file's keys

Generated from the config classes by `python -m inferactors._config.run_file_doc >
docs/run-file.md` (tests/config/test_run_file_doc.py fails when it is not current).
Durations are float seconds, sizes are bytes. A key left out takes its default;
"required" has none. Relative paths are read from the run file's folder.
"""


BORROWED: dict[type[Any], type[Any]] = {ManagedSection: ManagedConfig}
"""The run file's tables whose keys mirror a per-runtime config class's fields."""


def render() -> str:
    """The whole reference, as Markdown."""
    parts = [HEADER]
    for title, cl in _tables(RunConfig, "", "top level"):
        parts.append(_section(title, cl))
    return "\n".join(parts)


def _tables(cl: type[Any], prefix: str, title: str) -> Iterator[tuple[str, type[Any]]]:
    """``cl``'s table and, after it, the tables its keys hold, depth first."""
    yield title, cl
    hints = typing.get_type_hints(cl)
    for field in attrs.fields(cl):
        if cl is RunInstance and field.name == "spec":
            yield from _nested(InferenceSpec, prefix)
            continue
        inner, many = _table_type(hints[field.name])
        if inner is None:
            continue
        key = f"{prefix}.{field.name}" if prefix else field.name
        yield from _tables(inner, key, f"[[{key}]]" if many else f"[{key}]")


def _nested(cl: type[Any], prefix: str) -> Iterator[tuple[str, type[Any]]]:
    """The tables held by the keys of ``cl``, whose own keys sit flat in ``prefix``'s."""
    for title, inner in _tables(cl, prefix, ""):
        if inner is not cl:
            yield title, inner


def _table_type(hint: Any) -> tuple[type[Any] | None, bool]:
    """The attrs class a key holds (a table), and whether it holds a list of them."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if attrs.has(hint):
        return hint, False
    if _is_union(hint) and len(args) == 1 and attrs.has(args[0]):
        return args[0], False
    tuple_of = typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis
    if tuple_of and attrs.has(args[0]):
        return args[0], True
    return None, False


def _section(title: str, cl: type[Any]) -> str:
    if cl is RunInstance:
        title = "[[instances]]"
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    notes = _field_notes(cl)
    hints = typing.get_type_hints(cl)
    fields = list(attrs.fields(cl))
    if cl is RunInstance:
        spec_notes = _field_notes(InferenceSpec)
        spec_hints = typing.get_type_hints(InferenceSpec)
        fields = [f for f in fields if f.name != "spec"]
        for field in attrs.fields(InferenceSpec):
            rows.append(_row(field, spec_hints[field.name], spec_notes.get(field.name, "")))
    for field in fields:
        rows.append(_row(field, hints[field.name], notes.get(field.name, "")))
    return f"## {title}\n\n" + "\n".join(rows) + "\n"


def _row(field: attrs.Attribute[Any], hint: Any, note: str) -> str:
    inner, many = _table_type(hint)
    kind = ("list of tables" if many else "table") if inner is not None else type_name(hint)
    cells = [f"`{field.name}`", kind, _default(field, kind), note]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def type_name(hint: Any) -> str:
    """A TOML reader's name for ``hint``: ``string``, ``float``, ``"a" or "b"``, ``list of
    string``, ``table of string to path``, ``string (optional)``."""
    args = typing.get_args(hint)
    if _is_union(hint):
        names = [type_name(a) for a in args if a is not type(None)]
        optional = " (optional)" if type(None) in args else ""
        return " or ".join(names) + optional
    if typing.get_origin(hint) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = args[0]
            if typing.get_origin(item) is tuple and len(typing.get_args(item)) == 2:
                key, value = typing.get_args(item)
                return f"table of {type_name(key)} to {type_name(value)}"
            return f"list of {type_name(item)}"
        return "list"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return " or ".join(f'"{_enum_value(m)}"' for m in hint)
    simple = {str: "string", int: "integer", float: "float", bool: "boolean", Path: "path"}
    return simple.get(hint, getattr(hint, "__name__", str(hint)))


def _enum_value(member: enum.Enum) -> str:
    return str(getattr(member, "id", member.value))


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _default(field: attrs.Attribute[Any], kind: str) -> str:
    default = field.default
    if default is attrs.NOTHING:
        return "required"
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = typing.cast(Any, default).factory()
    if default is None:
        return "none"
    if attrs.has(type(default)):
        return "(its defaults)"
    if isinstance(default, enum.Enum):
        return f'"{_enum_value(default)}"'
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, str):
        return f'"{default}"'
    if isinstance(default, tuple) and kind.startswith("table of"):
        return "{" + ", ".join(f'"{k}" = "{v}"' for k, v in default) + "}"
    if isinstance(default, tuple):
        return "[" + ", ".join(f'"{item}"' for item in default) + "]" if default else "[]"
    return str(default)


def _field_notes(cl: type[Any]) -> dict[str, str]:
    """One line for each field of ``cl`` that its documentation describes (a field that
    mirrors one of the per-runtime config, `BORROWED`, is described there)."""
    notes = _attributes_section(inspect.getdoc(BORROWED[cl]) or "") if cl in BORROWED else {}
    notes.update(_attributes_section(inspect.getdoc(cl) or ""))
    notes.update(_attribute_docstrings(cl))
    return {name: _one_line(text) for name, text in notes.items()}


def _attributes_section(doc: str) -> dict[str, str]:
    """The entries under ``Attributes:`` in a Google-style docstring."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    if "Attributes:" not in lines:
        return found
    name = None
    for line in lines[lines.index("Attributes:") + 1 :]:
        if not line.strip():
            break
        entry = re.match(r"^    (\w+)(?: \([^)]*\))?: (.*)$", line)
        if entry:
            name = entry[1]
            found[name] = entry[2]
        elif name is not None and line.startswith("        "):
            found[name] += " " + line.strip()
        else:
            break
    return found


def _attribute_docstrings(cl: type[Any]) -> dict[str, str]:
    """The docstrings written under a field in ``cl``'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cl)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for first, second in itertools.pairwise(body):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            found[first.target.id] = " ".join(second.value.value.split())
    return found


def _one_line(text: str) -> str:
    """The first sentence of ``text``, its docstring markup plain."""
    text = " ".join(text.split())
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0]
    return sentence.rstrip(".")


if __name__ == "__main__":
    print(render(), end="")
