"""A linear scan of TOML text for nesting too deep, run BEFORE tomllib sees the text.

tomllib recurses once per nested array or inline table, and a dotted key
of n segments (``a.a.a...=1``, or a ``[a.a.a...]`` header) costs it time and memory that
grow faster than n: a 200 KB key 100,000 segments deep took over 120 s and 21 GB. So the
depth is judged on the text first, in one pass: table-header segments (plus one for an
array of tables), dotted-key segments and bracket/brace nesting are counted outside
strings and comments, and the first point past `MAX_DEPTH` levels is refused naming its
line. Levels count as `inferactors._safe_json.check_tree` counts them (the top-level table
is level 1); the scan never counts more than the parsed tree would hold, so what it lets
through is judged exactly by `check_tree` after parsing. Malformed TOML is not this scan's
business: it is left to tomllib, which names the syntax error. Pure; no I/O.
"""

from __future__ import annotations

import re

from .._errors import InvalidConfig
from .._safe_json import MAX_DEPTH

_PLAIN = re.compile(r"[^\"'#\[\]{}.=,\n]+")
_BASIC_BODY = re.compile(r'(?:[^"\\\n]|\\.)*')
_ML_BASIC_BODY = re.compile(r'(?:[^"\\]|\\.|"(?!""))*', re.DOTALL)


def check_toml_depth(text: str) -> None:
    """Refuse TOML nested deeper than `MAX_DEPTH` levels, in time linear in ``len(text)``.

    Raises:
        InvalidConfig: ``"TOML nested too deep (over 64 levels of tables, arrays or dotted
            keys) at line 3"``.
    """
    scan = _Scan(text)
    where = scan.run()
    if where is not None:
        line = text.count("\n", 0, where) + 1
        raise InvalidConfig(
            f"TOML nested too deep (over {MAX_DEPTH} levels of tables, arrays or dotted keys) "
            f"at line {line}"
        )


class _Scan:
    """The scanner's state. ``stack`` holds, per open array or inline table, its kind and
    the length of its path; ``table`` is the path length of the current ``[table]``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.stack: list[tuple[str, int]] = []
        self.table = 0
        self.header: int | None = None  # dots seen so far inside a [table] header
        self.header_array = False
        self.key_dots = 0
        self.value_path: int | None = None  # None: reading a key; else the value's path

    def run(self) -> int | None:
        """Scan the text; the offset of the first point too deep, or None."""
        text, pos, end = self.text, 0, len(self.text)
        while pos < end:
            plain = _PLAIN.match(text, pos)
            if plain is not None:
                pos = plain.end()
                continue
            char = text[pos]
            if char in "\"'":
                pos = self._skip_string(pos)
                continue
            if char == "#":
                newline = text.find("\n", pos)
                pos = end if newline < 0 else newline
                continue
            if self._token(char, pos):
                return pos
            pos += 1
        return None

    def _token(self, char: str, pos: int) -> bool:
        """Take one structural character; True when it goes past `MAX_DEPTH`."""
        if self.header is not None:
            return self._in_header(char, pos)
        if char == "\n":
            if not self.stack:
                self.key_dots, self.value_path = 0, None
            return False
        if char == ".":
            if self.value_path is not None:
                return False  # a float or a date in a value
            self.key_dots += 1
            return self._base() + self.key_dots + 1 > MAX_DEPTH
        if char == "=":
            self.value_path = self._base() + self.key_dots + 1
            return self.value_path > MAX_DEPTH
        if char in "[{":
            if self.value_path is None and not self.stack:
                self._open_header(pos)
                return False
            path = self.value_path if self.value_path is not None else self._base() + 1
            self.stack.append((char, path))
            self.key_dots = 0
            self.value_path = path + 1 if char == "[" else None
            return path + 1 > MAX_DEPTH
        if char == ",":
            self._next_item()
        elif char in "]}" and self.stack:
            self.stack.pop()
            self.value_path = 0  # after a value: only , ] } or a newline may follow
        return False

    def _base(self) -> int:
        """The path length of the table the current key belongs to."""
        return self.stack[-1][1] if self.stack else self.table

    def _next_item(self) -> None:
        if self.stack and self.stack[-1][0] == "[":
            self.value_path = self.stack[-1][1] + 1
        else:
            self.key_dots, self.value_path = 0, None

    def _open_header(self, pos: int) -> None:
        self.header = 0
        self.header_array = self.text.startswith("[", pos + 1)

    def _in_header(self, char: str, pos: int) -> bool:
        if char == ".":
            self.header = (self.header or 0) + 1
            return self.header + 2 + self.header_array > MAX_DEPTH  # the table is a level
        if char == "[" and self.header_array and self.header == 0:
            return False  # the second bracket of [[
        if char in "]\n":
            self.table = (self.header or 0) + 1 + self.header_array
            self.header, self.key_dots, self.value_path = None, 0, 0
        return False

    def _skip_string(self, pos: int) -> int:
        """The offset just past the string starting at ``pos`` (the end of the line, or of
        the text, for one never closed: tomllib will name that error)."""
        text = self.text
        quote = text[pos]
        if text.startswith(quote * 3, pos):
            if quote == '"':
                close = _end(_ML_BASIC_BODY.match(text, pos + 3), pos + 3)
                if not text.startswith('"""', close):
                    return len(text)
            else:
                close = text.find("'''", pos + 3)
                if close < 0:
                    return len(text)
            run = 3
            while run < 5 and text.startswith(quote, close + run):
                run += 1
            return close + run
        if quote == '"':
            close = _end(_BASIC_BODY.match(text, pos + 1), pos + 1)
        else:
            newline = text.find("\n", pos + 1)
            close = text.find("'", pos + 1, len(text) if newline < 0 else newline)
            close = (len(text) if newline < 0 else newline) if close < 0 else close
        return close + 1 if text.startswith(quote, close) else close


def _end(match: re.Match[str] | None, start: int) -> int:
    """Where a body pattern (which also matches the empty string) stopped."""
    return start if match is None else match.end()
