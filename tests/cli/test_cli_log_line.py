"""``inferactors logs`` prints a server's lines with their control characters made visible
and harmless: an escape cannot set the terminal's title, clear the screen, move the cursor
over earlier lines, or forge a line of its own with a carriage return. (And a reload's
words say ``none`` where nothing is left unchanged.)"""

from __future__ import annotations

import unicodedata

from inferactors._cli.control_format import harmless, log_line, reload_words

HOSTILE = [
    "\x1b]0;PWNED-TITLE\x07title set",
    "\x1b[2J\x1b[Hscreen cleared",
    "fake\rOVERWRITE carriage return",
    "\x1b[31mred\x1b[0m and bell\x07",
    "nul\x00byte and \ufffd bad utf8",
    "\x1b[1A\x1b[2Kerased the previous line",
    "c1 \x9b31m csi",
]


def test_no_control_character_reaches_the_terminal() -> None:
    for text in HOSTILE:
        printed = log_line({"at": 0.0, "stream": "stderr", "pid": 42, "text": text})
        controls = [c for c in printed if unicodedata.category(c) == "Cc"]
        assert controls == [], (text, printed)
        assert printed.endswith(harmless(text))


def test_control_characters_are_shown_as_escapes_and_tabs_and_text_kept() -> None:
    assert harmless("\x1b[31mred\tok\x07") == "\\x1b[31mred\tok\\x07"
    assert harmless("plain línea ✓") == "plain línea ✓"
    assert harmless("a\rb\nc\x7f\x9b") == "a\\x0db\\x0ac\\x7f\\x9b"


def test_a_reload_that_leaves_nothing_unchanged_says_none_not_a_dash() -> None:
    said = reload_words({"added": ["b"], "removed": ["a"], "unchanged": []})
    assert said.splitlines() == ["added: b", "removed: a", "unchanged: none"]


def test_a_reload_that_applied_a_budget_never_says_nothing_changed() -> None:
    said = reload_words({"unchanged": ["a", "b"], "applied": ["residency"]})
    assert said.splitlines() == ["no instance changed (2 unchanged)", "applied [residency] live"]
    plain = reload_words({"unchanged": ["a"], "applied": []})
    assert plain == "nothing changed (1 instance(s) unchanged)"


def test_an_events_own_line_breaks_may_be_kept_and_nothing_else() -> None:
    assert harmless("exited\n    | \x1b[2Joom", "\n") == "exited\n    | \\x1b[2Joom"
