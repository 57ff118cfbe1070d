"""The flags a server program says it knows, read from its ``--help`` (pure; no I/O).

The static allowlist (``_config/allowlist.py``) says which flags we let
through; whether the binary at hand has them is another question (this llama-server build
has neither ``--mlock`` nor ``--no-mmap``). So admission reads the program's own ``--help``
once per program digest (``_edges/serve_help.py``) and `check_known_flags` refuses an
``extra_args`` flag the program does not list.

Two dialects are read, both from the real texts (``tests/policy/help_texts/``):

- llama.cpp's ``common/arg.cpp``: an option line starts in column 0 with its spellings,
  comma-separated, a metavar after the last one, then two or more spaces and the
  description (``-h,    --help, --usage                  print usage and exit``); an option
  whose spellings fill the column has its description on the next, indented, line;
- Python's argparse: the same, indented by two spaces (``  -h, --help            show
  this help message and exit``, ``  --host HOST           Host for the HTTP server``).

Description lines are indented further (argparse: 24 columns, llama.cpp: 40), so a line
indented by more than `MAX_OPTION_INDENT` is never read for flags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from .._config.allowlist import flag_positions
from .._errors import InvalidConfig
from .._flavor import InferFlavor

MAX_OPTION_INDENT = 4
"""Columns of indentation an option line may have (argparse indents by 2)."""

_FLAG = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_.-]*")
_GAP = re.compile(r"(?<![, ]) {2,}")


@attrs.frozen
class KnownFlags:
    """What one serve program says about itself.

    Attributes:
        program: The program's path, for messages.
        version: Its version line (``version: 0.5.0-dev (build 0, ...)``), None if unknown.
        flags: Every spelling its ``--help`` lists (short and long); empty when unread.
        problem: Why the help could not be read (``"--help timed out after 10 s"``), or
            None when it was.
    """

    program: str
    version: str | None
    flags: frozenset[str]
    problem: str | None = None


def parse_help_flags(text: str) -> frozenset[str]:
    """Every flag spelling an option line of ``text`` lists (module docstring).

    ``"-h,    --help, --usage                  print usage"`` gives ``-h``, ``--help`` and
    ``--usage``; ``"  --log-level {DEBUG,INFO}"`` gives ``--log-level``. Usage lines
    (``usage: prog [-h] ...``) and descriptions are not read.
    """
    flags: set[str] = set()
    for line in text.splitlines():
        body = line.lstrip(" ")
        if not body.startswith("-") or len(line) - len(body) > MAX_OPTION_INDENT:
            continue
        head = _GAP.split(body, maxsplit=1)[0]
        for word in head.split():
            name = word.rstrip(",")
            if _FLAG.fullmatch(name):
                flags.add(name)
    return frozenset(flags)


def check_known_flags(flavor: InferFlavor, args: Sequence[str], known: KnownFlags) -> None:
    """Refuse any flag of ``args`` (``serve.extra_args``, already allowlisted) that the
    program does not list.

    Raises:
        InvalidConfig: ``"serve.extra_args[3]: --mlock is not a flag of llama-server
            (version: 0.5.0-dev ...)"``; or, when the help could not be read,
            ``"serve.extra_args: cannot check the flags of PROGRAM: WHY"``.
    """
    positions = flag_positions(flavor, args)
    if not positions:
        return
    if known.problem is not None or not known.flags:
        why = known.problem or "its --help lists no flags"
        raise InvalidConfig(
            f"serve.extra_args: cannot check the flags against {known.program}: {why}; "
            "extra_args are refused until its --help can be read"
        )
    for index, flag in positions:
        if flag not in known.flags:
            version = known.version or "version unknown"
            raise InvalidConfig(
                f"serve.extra_args[{index}]: {flag} is not a flag of {known.program} ({version})"
            )
