"""Tables for people: aligned columns, and on a terminal only, colour and the terminal's
width (standard library only: the client commands stay light).

Colour is used when the output is a TTY, ``NO_COLOR`` is unset or empty (no-color.org)
and ``TERM`` is not ``dumb``; a pipe or a file gets plain text, never escapes. On a TTY
the last column (a free-text detail) is cut to the terminal's width, marked with ``…``;
a pipe gets whole lines.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

RESET = "\x1b[0m"
COLOURS = {
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "red": "\x1b[31m",
    "dim": "\x1b[2m",
    "bold": "\x1b[1m",
}
"""SGR codes of the few colours the tables use."""
MIN_LAST_COLUMN = 12
"""The narrowest a cut last column gets (characters): a narrow terminal wraps instead."""
GAP = "  "


def colour_wanted(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` should get colour: a TTY, no ``NO_COLOR`` (or an empty one), and
    a ``TERM`` that is not ``dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def width_of(stream: TextIO) -> int | None:
    """The terminal's width in columns when ``stream`` is a TTY, else None (no limit)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    return shutil.get_terminal_size().columns


Painter = Callable[[int, str], str | None]
"""The colour name (`COLOURS`) of the cell at a column index with that text, or None."""


def table(
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = None,
    paint: Painter | None = None,
) -> str:
    """``rows`` (the first one is the header, in bold when painted) as aligned columns two
    spaces apart, trailing spaces dropped. ``width``: cut the last column so each line fits
    (not below `MIN_LAST_COLUMN` characters). ``paint``: colour cells (the header's too)."""
    if not rows:
        return ""
    count = len(rows[0])
    widths = [max(len(row[i]) for row in rows) for i in range(count)]
    if width is not None and count > 1:
        room = width - sum(widths[:-1]) - len(GAP) * (count - 1)
        widths[-1] = min(widths[-1], max(room, MIN_LAST_COLUMN))
    lines = []
    for number, row in enumerate(rows):
        cells = [_cut(cell, widths[i]) if i == count - 1 else cell for i, cell in enumerate(row)]
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(cells)]
        if paint is not None:
            padded = [_painted(number, i, cell, text, paint) for i, (cell, text) in
                      enumerate(zip(cells, padded, strict=True))]  # fmt: skip
        lines.append(GAP.join(padded).rstrip())
    return "\n".join(lines)


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[: max(width - 1, 0)] + "…"


def _painted(number: int, column: int, cell: str, padded: str, paint: Painter) -> str:
    """``padded`` with the colour of its cell (the padding left outside the escapes)."""
    colour = "bold" if number == 0 else paint(column, cell)
    if colour is None or not cell:
        return padded
    return f"{COLOURS[colour]}{cell}{RESET}{padded[len(cell) :]}"


STATE_COLOURS = {
    "running": "green",
    "starting": "yellow",
    "degraded": "yellow",
    "backoff": "yellow",
    "stopping": "yellow",
    "stopped": "dim",
    "idle": "dim",
    "fatal": "red",
    "gone": "red",
    "unknown": "red",
}
"""The colour of each display state (``_policy/service_status.py``)."""
