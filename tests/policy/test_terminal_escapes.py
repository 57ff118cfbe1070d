"""Terminal escapes never hide or garble a server's words (issue 9, breaker's F5).

A title (OSC) before ``error: invalid argument`` defeated the classifier and was shown raw
(``| ]0;xerror: ...``). `strip_escapes` drops every ECMA-48 escape class, 7- and 8-bit, before
a line is classified (`StartupWatch.feed`) and when it is shown (`clean`).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._policy.startup_fault import StartupWatch, clean, diagnose, strip_escapes
from inferactors._stop_reasons import FaultKind

ERROR = "error: invalid argument: --lies"

ESCAPES = {
    "CSI colour": "\x1b[1;31m",
    "CSI erase screen": "\x1b[2J",
    "CSI private mode": "\x1b[?25l",
    "CSI 8-bit": "\x9b31m",
    "OSC title ended by BEL": "\x1b]0;x\x07",
    "OSC hyperlink ended by ST": "\x1b]8;;http://example.invalid/\x1b\\",
    "OSC 8-bit ended by 8-bit ST": "\x9d0;title\x9c",
    "DCS sixel": "\x1bPq#0;2;0;0;0#0~~\x1b\\",
    "DCS 8-bit": "\x90qdata\x9c",
    "SOS": "\x1bXhidden\x1b\\",
    "PM": "\x1b^private\x1b\\",
    "APC": "\x1b_kitty;graphics\x1b\\",
    "charset designation": "\x1b(B",
    "keypad mode": "\x1b=",
    "reset": "\x1bc",
    "save cursor": "\x1b7",
}


@pytest.mark.parametrize("escape", ESCAPES.values(), ids=ESCAPES.keys())
def test_each_escape_class_is_stripped_before_and_inside_a_line(escape: str) -> None:
    assert strip_escapes(f"{escape}{ERROR}") == ERROR
    assert strip_escapes(f"error: {escape}invalid argument: --lies{escape}") == ERROR


@pytest.mark.parametrize("escape", ESCAPES.values(), ids=ESCAPES.keys())
def test_an_escape_before_the_error_line_still_classifies_it(escape: str) -> None:
    found = diagnose(["llama-server starting", f"{escape}{ERROR}"])
    assert found is not None
    assert (found.kind, found.line) == (FaultKind.INVALID_FLAG, ERROR)
    assert found.last_lines == ("llama-server starting", ERROR)


def test_the_breakers_osc_line_is_classified_and_shown_clean() -> None:
    """osc.sh printed ``\\033]0;x\\007error: invalid argument: --lies``: a crash, shown
    as ``]0;xerror: ...``."""
    watch = StartupWatch()
    found = watch.feed("\x1b]0;x\x07error: invalid argument: --lies")
    assert found is not None
    assert found.describe() == "invalid flag: error: invalid argument: --lies"
    assert clean("\x1b]0;pwned\x07\x1b[2J\x1b[31mFAKE: error\x1b[0m") == "FAKE: error"


def test_an_unterminated_string_runs_to_the_end_of_the_line() -> None:
    assert strip_escapes("before \x1b]0;never ended") == "before "
    assert strip_escapes("before \x1bPdcs never ended") == "before "
    assert strip_escapes("cut \x1b[") == "cut "
    assert strip_escapes("lone \x1b") == "lone "


def test_text_without_escapes_is_unchanged() -> None:
    line = "0.00.005.544 E gguf_init_from_reader: failed to read magic [x] ^_^ ~ (100%)"
    assert strip_escapes(line) == line


def test_a_long_hostile_line_is_stripped_in_linear_time() -> None:
    """Unterminated strings and CSIs repeated: no backtracking blow-up (well under 1 s)."""
    hostile = ("\x1b]" + "x" * 50 + "\x1b[" + "1;" * 50) * 4000
    assert "\x1b" not in strip_escapes(hostile)


_ANY_ESCAPE_BYTE = re.compile(r"[\x1b\x90\x98\x9b\x9c\x9d\x9e\x9f]")


@given(st.lists(st.sampled_from([*ESCAPES.values(), "a", "error", " ", "\x1b", "[", "]"])))
def test_no_escape_introducer_survives_clean(pieces: list[str]) -> None:
    assert not _ANY_ESCAPE_BYTE.search(clean("".join(pieces), limit=10_000))
