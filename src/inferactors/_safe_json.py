"""The one way inferactors reads JSON, and the check of parsed data it also applies to TOML.

Everything we parse may be hostile: a server's reply, a run file, a registry, a model's
``config.json``. `parse_json` refuses, with `InvalidConfig` naming where:

- nesting deeper than `MAX_DEPTH` levels, found by a scan of the text BEFORE parsing (the
  json module recurses once per level and would raise RecursionError, or worse, on a
  100,000-deep ``[[[[...``); the message names the line and column;
- a key that appears twice in one object (``$.models[0]: the object has the key "name"
  twice``);
- an integer of more than `MAX_INT_DIGITS` digits (Python 3.11 refuses past 4,300 digits
  with a bare ValueError; converting even that many costs quadratic time), and the
  non-JSON constants ``NaN``, ``Infinity`` and ``-Infinity``, and numbers too large for a
  float (``1e999``, which would read as infinity);
- text that is not UTF-8, or not JSON (line and column).

`dump_json` writes JSON as UTF-8 bytes whatever the strings hold: a lone UTF-16 surrogate
(``"\\ud800"`` is valid JSON and reads as a ``str`` UTF-8 cannot encode) is written back as
the same ``\\uXXXX`` escape, never an encoding error.

`check_tree` applies the depth and integer rules to data that is already parsed (TOML, whose
parser has no hooks), naming the path: ``$.instances[0].serve.port: an integer of more than
100 digits``. Callers prefix the file name, or turn the error into their own kind (a server's
malformed reply is a `BackendError`, not a config error). Pure; no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence

from ._errors import InvalidConfig

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (a registry needs 4, a server reply ~6)."""

MAX_INT_DIGITS = 100
"""Most decimal digits an integer may have (a byte count needs 20)."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_BIG = 10**MAX_INT_DIGITS
_SHOWN_KEY_CHARS = 40
_SHOWN_PATH_STEPS = 8

PathStep = str | int


class NotJson(InvalidConfig):
    """The text is not JSON at all: not UTF-8, or a syntax error (line and column given)."""


class _Refused:
    """What a parse hook returns in place of a value it refuses; the walk finds its path."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def parse_json(text: str | bytes, *, in_steps: bool = False) -> object:
    """Parse untrusted JSON text (bytes must be UTF-8) into plain Python values.

    ``in_steps``: the depth scan walks the brackets one match at a time (slower, but it
    lets other threads run between matches: for a large body parsed in a worker thread,
    so the event loop's thread is never held for the whole scan).

    Raises:
        NotJson: text that is not UTF-8 or not JSON (an `InvalidConfig`).
        InvalidConfig: nesting deeper than `MAX_DEPTH`, a duplicate key, an integer of more
            than `MAX_INT_DIGITS` digits, or ``NaN`` / ``Infinity``. Every message is one
            line and names the line and column or the JSON path.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotJson(f"not UTF-8 text (byte {error.start})") from None
    if in_steps:
        _check_depth_in_steps(text)
    else:
        _check_depth(text)
    refused: list[_Refused] = []
    decoder = json.JSONDecoder(
        object_pairs_hook=lambda pairs: _object(pairs, refused),
        parse_int=lambda digits: _integer(digits, refused),
        parse_constant=lambda name: _constant(name, refused),
        parse_float=lambda text: _float(text, refused),
    )
    try:
        document = decoder.decode(text)
    except json.JSONDecodeError as error:
        raise NotJson(
            f"JSON syntax error at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    if refused:
        _raise_first_refusal(document)
    return document


def check_tree(data: object) -> None:
    """Check parsed data (TOML or JSON values: dicts, lists and scalars) for nesting deeper
    than `MAX_DEPTH` and integers of more than `MAX_INT_DIGITS` digits. Depth counts as JSON
    brackets do: the top-level table or array is level 1, so ``a = [[1]]`` is 3 deep.
    Iterative: any depth is walked without recursion.

    Raises:
        InvalidConfig: ``"<path>: nested deeper than 64 levels"`` or ``"<path>: an integer
            of more than 100 digits"``, the first in document order.
    """
    for path, value in _walk(data):
        if len(path) + isinstance(value, dict | list) > MAX_DEPTH:
            raise InvalidConfig(f"{json_path(path)}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _BIG:
            raise InvalidConfig(
                f"{json_path(path)}: an integer of more than {MAX_INT_DIGITS} digits"
            )


def json_path(path: Sequence[PathStep]) -> str:
    """``["models", 0, "name"]`` as ``$.models[0].name``; odd keys are quoted, long keys and
    paths shortened, so the result is one short line."""
    steps = [_step(step) for step in path]
    if len(steps) > _SHOWN_PATH_STEPS:
        steps = [*steps[:_SHOWN_PATH_STEPS], f"...({len(steps)} steps)"]
    return "$" + "".join(steps)


def _step(step: PathStep) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if _IDENTIFIER.fullmatch(step) and len(step) <= _SHOWN_KEY_CHARS:
        return f".{step}"
    return f"[{_quoted(step)}]"


def _quoted(key: str) -> str:
    """``key`` as a JSON string (escapes keep it on one line), cut after 40 characters."""
    shown = json.dumps(key[:_SHOWN_KEY_CHARS])
    return f'{shown[:-1]}..."' if len(key) > _SHOWN_KEY_CHARS else shown


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than `MAX_DEPTH`: brackets are counted outside strings, in a
    fast pass over the brackets alone; only a refusal pays for finding the position. Text
    with no more openers than `MAX_DEPTH` in all cannot nest deeper, so a short reply (a
    health body, a small model list: most probes) skips the scan."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth = depth + 1 if bracket in "[{" else depth - 1
        if depth > MAX_DEPTH:
            offset = _deep_offset(text)
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
            raise InvalidConfig(
                f"JSON nested deeper than {MAX_DEPTH} levels at line {line}, column {column}"
            )


def _check_depth_in_steps(text: str) -> None:
    """`_check_depth`, one bracket at a time (`parse_json`'s ``in_steps``)."""
    offset = _deep_offset(text)
    if offset:
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise InvalidConfig(
            f"JSON nested deeper than {MAX_DEPTH} levels at line {line}, column {column}"
        )


def _deep_offset(text: str) -> int:
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        bracket = match.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif bracket in "]}":
            depth -= 1
    return 0


def _object(pairs: list[tuple[str, object]], refused: list[_Refused]) -> object:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            break
        seen.add(key)
    marker = _Refused(f"the object has the key {_quoted(key)} twice")
    refused.append(marker)
    return marker


def _integer(digits: str, refused: list[_Refused]) -> object:
    count = len(digits.lstrip("-"))
    if count <= MAX_INT_DIGITS:
        return int(digits)
    marker = _Refused(f"an integer of {count} digits (at most {MAX_INT_DIGITS})")
    refused.append(marker)
    return marker


def _float(text: str, refused: list[_Refused]) -> object:
    """A JSON number with a fraction or exponent; one too large for a float (``1e999``)
    would become infinity, which JSON cannot say: refused like ``Infinity``."""
    value = float(text)
    if math.isfinite(value):
        return value
    marker = _Refused(f"{text[:24]} is not a finite JSON number (too large for a float)")
    refused.append(marker)
    return marker


def _constant(name: str, refused: list[_Refused]) -> object:
    marker = _Refused(f"{name} is not a JSON number")
    refused.append(marker)
    return marker


def _raise_first_refusal(document: object) -> None:
    for path, value in _walk(document):
        if isinstance(value, _Refused):
            raise InvalidConfig(f"{json_path(path)}: {value.why}")
    raise AssertionError("a refused value was recorded but not found")  # pragma: no cover


def _walk(data: object) -> Iterator[tuple[list[PathStep], object]]:
    """Every value in ``data`` with its path, in document order (depth first), iteratively."""
    stack: list[tuple[list[PathStep], object]] = [([], data)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if isinstance(value, dict):
            children = [([*path, key], item) for key, item in value.items()]
        elif isinstance(value, list):
            children = [([*path, index], item) for index, item in enumerate(value)]
        else:
            continue
        stack.extend(reversed(children))


def dump_json(value: object) -> bytes:
    """``value`` as compact JSON in UTF-8 (module docstring): text as it is, except when a
    string holds a lone surrogate, which UTF-8 cannot carry; then the whole document is
    written with ``\\uXXXX`` escapes for every non-ASCII character (the surrogate exactly as
    a client wrote it), which means the same JSON.

    Raises:
        ValueError: NaN or an infinity in ``value``.
        TypeError: a value JSON has no type for.
    """
    try:
        return json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
