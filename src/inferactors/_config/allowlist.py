"""The ``serve.extra_args`` allowlist and the walk that checks an argv against it (pure).

Extra arguments reach the server's argv verbatim (never a shell), so only exact flag spellings
from a list per flavor are accepted (`flag_rules.FLAG_RULES`), each followed by exactly the
number of values it takes, each value checked by its flag's rule. Host, port, model, draft,
context size and KV cache type are set by inferactors itself and are on no list; a flag that
takes a path or a secret is refused with the typed field to use instead. Whether the binary
at hand knows a flag is checked at admission (``_policy/help_flags.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from .._errors import InvalidConfig, cut
from .._flavor import InferFlavor
from .._safe_json import parse_json
from .flag_rules import FlagRule, ValueKind, rules_of, typed_field

MAX_EXTRA_ARGS = 32
"""Most entries ``serve.extra_args`` may hold (flags and values together)."""

MAX_VALUE_LEN = 256
"""Longest value, in characters, a flag in ``serve.extra_args`` may take."""

ALLOWED_FLAGS: Mapping[InferFlavor, Mapping[str, int]] = {
    flavor: {flag: rule.arity for flag, rule in rules_of(flavor).items()} for flavor in InferFlavor
}
"""Per flavor, each allowed flag (exact spelling) and how many values follow it (0 or 1);
the rules themselves are `flag_rules.FLAG_RULES`."""

MAX_TEXT_VALUE_LEN = 64 * 1024
"""Longest inline chat template or JSON object value, in characters."""

# A value is a plain word: letters, digits and the characters . _ : + - / (no comma, no
# shell metacharacters).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._:+/-]+")
# A value starting with '-' must be a decimal number. Stricter than a float parser: "-inf",
# "-nan" and "-1_0" are refused, so no server's own parser can read the value as a flag.
_NEGATIVE_NUMBER = re.compile(r"-(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NUMBER = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT = re.compile(r"-?[0-9]{1,10}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/-]{0,127}")
_FORBIDDEN_CHARS = re.compile(r"[\s\x00]")
_TEXT_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FREE_TEXT = (ValueKind.TEMPLATE, ValueKind.JSON_OBJECT)


def check_extra_args(flavor: InferFlavor, args: Sequence[str]) -> None:
    """Check ``serve.extra_args`` against the flavor's allowlist (`flag_rules.FLAG_RULES`).

    Args:
        flavor: The server the arguments are for; picks the allowlist.
        args: The argv fragment, flags and values as separate entries.

    Raises:
        InvalidConfig: more than 32 entries; a flag with whitespace or NUL; a flag not on
            the list (exact spelling, so ``--threads=4`` and ``--hos`` fail), or one that
            takes a path or a secret (the message names the typed field to use instead,
            ``serve.mmproj``, ``serve.api_key_file``); a flag missing its value; a value
            that breaks its flag's rule (an integer, a number, one of a set, a name, an
            inline template or a JSON object; a template or JSON value may hold whitespace,
            never NUL, and is at most 64 KiB). The message names the entry, e.g.
            ``serve.extra_args[3]``.
    """
    if len(args) > MAX_EXTRA_ARGS:
        raise InvalidConfig(
            f"serve.extra_args has {len(args)} entries; at most {MAX_EXTRA_ARGS} are allowed"
        )
    flag_positions(flavor, args)


def flag_positions(flavor: InferFlavor, args: Sequence[str]) -> list[tuple[int, str]]:
    """Walk ``args`` as `check_extra_args` does and return each flag with its index.

    Raises:
        InvalidConfig: as `check_extra_args` (except the count limit).
    """
    rules = rules_of(flavor)
    found: list[tuple[int, str]] = []
    index = 0
    while index < len(args):
        found.append((index, args[index]))
        index = _check_flag_at(flavor, rules, args, index)
    return found


def _check_single_token(index: int, entry: str) -> None:
    if _FORBIDDEN_CHARS.search(entry):
        raise InvalidConfig(
            f"serve.extra_args[{index}] must be a single token without whitespace or NUL: "
            f"{_quote(entry)}"
        )


def _check_flag_at(
    flavor: InferFlavor, rules: Mapping[str, FlagRule], args: Sequence[str], index: int
) -> int:
    """Check the flag at ``index`` and its value; return the index of the next flag."""
    flag = args[index]
    _check_single_token(index, flag)
    rule = rules.get(flag)
    if rule is None:
        raise InvalidConfig(_not_allowed(flavor, index, flag))
    if index + rule.arity >= len(args):
        raise InvalidConfig(f"serve.extra_args[{index}] {flag} needs {rule.arity} value(s)")
    if rule.arity:
        _check_value(index + 1, flag, rule, args[index + 1])
    return index + 1 + rule.arity


def _not_allowed(flavor: InferFlavor, index: int, flag: str) -> str:
    typed = typed_field(flavor, flag)
    if typed is None:
        return (
            f"serve.extra_args[{index}] {_quote(flag)} is not an allowed {flavor.id} flag "
            "(exact spelling, value as a separate entry)"
        )
    instead = f"use {typed.field} instead" if typed.field else "no field replaces it"
    return (
        f"serve.extra_args[{index}] {_quote(flag)} is not an allowed {flavor.id} flag: it "
        f"takes {typed.takes}, never passed as a raw argument; {instead}"
    )


def _check_value(index: int, flag: str, rule: FlagRule, value: str) -> None:
    if rule.kind not in _FREE_TEXT:
        _check_single_token(index, value)
    problem = _value_problem(rule, value)
    if problem is not None:
        raise InvalidConfig(
            f"serve.extra_args[{index}] {_quote(value)} (the value of {flag}) {problem}"
        )


def _value_problem(rule: FlagRule, value: str) -> str | None:
    """What is wrong with ``value`` under ``rule``, or None."""
    kind = rule.kind
    if kind in _FREE_TEXT:
        return _text_problem(kind, value)
    if len(value) > MAX_VALUE_LEN:
        return f"is longer than {MAX_VALUE_LEN} characters"
    if kind is ValueKind.CHOICE:
        ok = value in rule.choices
    elif kind is ValueKind.INT:
        ok = _INT.fullmatch(value) is not None
    elif kind is ValueKind.NUMBER:
        ok = _NUMBER.fullmatch(value) is not None
    elif kind is ValueKind.NAME:
        ok = _NAME.fullmatch(value) is not None
    else:
        ok = is_plain_value(value)
    return None if ok else f"is not {rule.rule_text}"


def _text_problem(kind: ValueKind, value: str) -> str | None:
    if not 0 < len(value) <= MAX_TEXT_VALUE_LEN:
        return f"must be 1 to {MAX_TEXT_VALUE_LEN} characters"
    if _TEXT_CONTROLS.search(value):
        return "holds a NUL or another control character"
    if not value.strip():
        return "is only whitespace"
    if value.startswith("-"):
        return "starts with '-' (a server would read it as a flag)"
    if kind is ValueKind.JSON_OBJECT:
        try:
            parsed = parse_json(value)
        except InvalidConfig as error:
            return f"is not JSON: {error}"
        if not isinstance(parsed, dict):
            return "is not a JSON object"
    return None


def is_plain_value(value: str) -> bool:
    """Whether ``value`` may follow an allowed flag.

    True when it is 1-256 characters from ``[A-Za-z0-9._:+-/]`` and, if it starts with
    ``-``, is a decimal number such as ``-0.5`` or ``-1e3``.
    """
    if not 0 < len(value) <= MAX_VALUE_LEN or not _PLAIN_VALUE.fullmatch(value):
        return False
    return not value.startswith("-") or _NEGATIVE_NUMBER.fullmatch(value) is not None


def _quote(text: str) -> str:
    return json.dumps(cut(text))


MAX_LORA = 8
"""Most LoRA adapters ``serve.lora`` may name."""

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}")


def check_typed_fields(
    flavor: InferFlavor, mmproj: str | None, lora: Sequence[str], api_key_file: str | None
) -> None:
    """Check the typed fields that replace path and secret flags.

    Raises:
        InvalidConfig: ``serve.mmproj`` or a ``serve.lora[i]`` that is not a registry name
            (a plain token of 1-128 characters); an mmproj or an API key for a flavor
            other than llama.cpp; more than 8 LoRA adapters (more than 1 for mlx-lm); LoRA
            for Ollama; an ``api_key_file`` that is not an absolute path (no NUL, at most
            4096 characters).
    """
    llama = flavor is InferFlavor.LLAMACPP
    if mmproj is not None:
        _check_name("serve.mmproj", mmproj)
        if not llama:
            raise InvalidConfig(f"serve.mmproj is supported by {InferFlavor.LLAMACPP.id} only")
    limit = {InferFlavor.LLAMACPP: MAX_LORA, InferFlavor.MLX_LM: 1}.get(flavor, 0)
    if len(lora) > limit:
        raise InvalidConfig(
            f"serve.lora names {len(lora)} adapters; {flavor.id} takes at most {limit}"
        )
    for index, name in enumerate(lora):
        _check_name(f"serve.lora[{index}]", name)
    if api_key_file is not None:
        if not llama:
            raise InvalidConfig(
                f"serve.api_key_file is supported by {InferFlavor.LLAMACPP.id} only"
            )
        if not (0 < len(api_key_file) <= 4096 and api_key_file.startswith("/")) or (
            "\x00" in api_key_file
        ):
            raise InvalidConfig(
                f"serve.api_key_file must be an absolute path, got {_quote(api_key_file)}"
            )


def _check_name(field: str, name: str) -> None:
    if not _MODEL_NAME.fullmatch(name):
        raise InvalidConfig(
            f"{field} must be a registry model name (1-128 chars: letters, digits and ._+:-, "
            f"starting with a letter or digit), got {_quote(name)}"
        )
