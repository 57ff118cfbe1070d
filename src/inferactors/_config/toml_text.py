"""TOML text as checked data: the run file loader's parse, without its converter.

`parse_toml` is what `convert.run_config_from_toml` parses with, kept apart from the
converter (cattrs) so that a reader of one key (the state directory, for the CLI's client
commands: `state_dir.state_dir_of_file`) loads no more than it needs. Hostile text is
refused as `InvalidConfig`, never with a traceback: nesting past 64 levels is found by
`toml_depth.check_toml_depth` before tomllib sees the text, and the parsed data goes
through `inferactors._safe_json.check_tree` (depth, integers over 100 digits).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from .._errors import InvalidConfig
from .._safe_json import MAX_DEPTH, MAX_INT_DIGITS, check_tree
from .._untrusted_file import MiB
from .toml_depth import check_toml_depth

MAX_RUN_FILE_BYTES = 1 * MiB
"""The largest run file read (a real one is a few KiB); larger, a FIFO or a device is refused."""


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML text as data, checked by `check_tree` (depth, huge integers).

    Raises:
        InvalidConfig: a syntax error (line and column), nesting too deep for the parser
            or over 64 levels, or an integer over 100 digits (naming its path).
    """
    try:
        check_toml_depth(text)  # before tomllib: deep dotted keys cost it super-linear time
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}{error}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error).replace(
            "(at end of document)", f"(at end of document, after line {len(text.splitlines())})"
        )
        raise InvalidConfig(f"{source}TOML syntax error: {message}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise InvalidConfig(
            f"{source}TOML nested too deep (arrays or inline tables over {MAX_DEPTH} levels)"
        ) from None
    except ValueError:  # int() of a literal past Python's 4,300-digit limit
        raise InvalidConfig(f"{source}{_huge_integer(text)}") from None
    try:
        check_tree(data)
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}{error}") from None
    return data


_LONG_DIGITS = re.compile(rf"[0-9][0-9_]{{{MAX_INT_DIGITS},}}")


def _huge_integer(text: str) -> str:
    """Why tomllib refused an integer, naming its path when it can be found: every run of
    more than 100 digits is cut to 101 and the copy parsed only to locate the integer."""
    located = _LONG_DIGITS.sub("1" + "0" * MAX_INT_DIGITS, text)
    try:
        check_tree(tomllib.loads(located))
    except InvalidConfig as error:
        return str(error)
    except (ValueError, RecursionError):
        pass  # the copy does not parse either: say what we know without a path
    return f"TOML has an integer of more than {MAX_INT_DIGITS} digits"
