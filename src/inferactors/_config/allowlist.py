"""The ``serve.extra_args`` allowlist and the walk that checks an argv against it (pure).

Extra arguments reach the server's argv verbatim (never a shell), so only exact flag spellings
from a short list per flavor are accepted, each followed by exactly the number of values it
takes. Host, port, model, draft, context size and KV cache type are set by inferactors itself
and are on no list. Source: seed-behaviour.md section 1 ("extra_args allowlist", "The
validation walk") and checklist items 8-11.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from .._errors import InvalidConfig, cut
from .._flavor import InferFlavor

MAX_EXTRA_ARGS = 32
"""Most entries ``serve.extra_args`` may hold (flags and values together)."""

MAX_VALUE_LEN = 256
"""Longest value, in characters, a flag in ``serve.extra_args`` may take."""

_LLAMACPP_ONE_VALUE = (
    "--threads",
    "-t",
    "--threads-batch",
    "--batch-size",
    "-b",
    "--ubatch-size",
    "-ub",
    "--parallel",
    "-np",
    "--n-gpu-layers",
    "-ngl",
    "--temp",
    "--top-p",
    "--top-k",
    "--repeat-penalty",
    "--seed",
)
_LLAMACPP_NO_VALUE = (
    "--flash-attn",
    "-fa",
    "--cont-batching",
    "--mlock",
    "--no-mmap",
    "--jinja",
    "--metrics",
    "--no-webui",
)
_MLX_ONE_VALUE = ("--max-tokens", "--temp", "--top-p", "--top-k", "--log-level")

ALLOWED_FLAGS: Mapping[InferFlavor, Mapping[str, int]] = {
    InferFlavor.LLAMACPP: {
        **dict.fromkeys(_LLAMACPP_ONE_VALUE, 1),
        **dict.fromkeys(_LLAMACPP_NO_VALUE, 0),
    },
    InferFlavor.MLX_LM: dict.fromkeys(_MLX_ONE_VALUE, 1),
    InferFlavor.OLLAMA: {},
}
"""Per flavor, each allowed flag (exact spelling) and how many values follow it."""

# A value is a plain word: letters, digits and the characters . _ : + - / (no comma, no
# shell metacharacters).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._:+/-]+")
# A value starting with '-' must be a decimal number. Stricter than a float parser: "-inf",
# "-nan" and "-1_0" are refused, so no server's own parser can read the value as a flag.
_NEGATIVE_NUMBER = re.compile(r"-(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_FORBIDDEN_CHARS = re.compile(r"[\s\x00]")


def check_extra_args(flavor: InferFlavor, args: Sequence[str]) -> None:
    """Check ``serve.extra_args`` against the flavor's allowlist.

    Args:
        flavor: The server the arguments are for; picks the allowlist.
        args: The argv fragment, flags and values as separate entries.

    Raises:
        InvalidConfig: more than 32 entries; an entry with whitespace or NUL; a flag not on
            the list (exact spelling, so ``--threads=4`` and ``--hos`` fail); a flag missing
            its value; a value that is empty, longer than 256 characters, has a character
            outside ``[A-Za-z0-9._:+-/]`` or starts with ``-`` without being a number. The
            message names the entry, e.g. ``serve.extra_args[3]``.
    """
    if len(args) > MAX_EXTRA_ARGS:
        raise InvalidConfig(
            f"serve.extra_args has {len(args)} entries; at most {MAX_EXTRA_ARGS} are allowed"
        )
    for index, entry in enumerate(args):
        _check_single_token(index, entry)
    allowed = ALLOWED_FLAGS[flavor]
    index = 0
    while index < len(args):
        index = _check_flag_at(flavor, allowed, args, index)


def _check_single_token(index: int, entry: str) -> None:
    if _FORBIDDEN_CHARS.search(entry):
        raise InvalidConfig(
            f"serve.extra_args[{index}] must be a single token without whitespace or NUL: "
            f"{_quote(entry)}"
        )


def _check_flag_at(
    flavor: InferFlavor, allowed: Mapping[str, int], args: Sequence[str], index: int
) -> int:
    """Check the flag at ``index`` and its values; return the index of the next flag."""
    flag = args[index]
    arity = allowed.get(flag)
    if arity is None:
        raise InvalidConfig(
            f"serve.extra_args[{index}] {_quote(flag)} is not an allowed {flavor.id} flag "
            "(exact spelling, value as a separate entry)"
        )
    if index + arity >= len(args):
        raise InvalidConfig(f"serve.extra_args[{index}] {flag} needs {arity} value(s)")
    for offset in range(1, arity + 1):
        _check_value(index + offset, flag, args[index + offset])
    return index + 1 + arity


def _check_value(index: int, flag: str, value: str) -> None:
    if is_plain_value(value):
        return
    raise InvalidConfig(
        f"serve.extra_args[{index}] {_quote(value)} (the value of {flag}) is not a plain word "
        "or number"
    )


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
