"""``inferactors run`` prints a failed server's own words under its exit (issue 9 item 1)."""

from __future__ import annotations

from inferactors._cli.output import describe_event
from inferactors._events import GaveUp, ProcessExited
from inferactors._stop_reasons import Diagnosis, FaultKind, StopReason

WORDS = ("loading model", "error: invalid argument: --no-such-flag")
FLAG = Diagnosis(FaultKind.INVALID_FLAG, WORDS[-1], WORDS)


def test_a_start_up_failure_prints_why_and_the_last_lines_indented() -> None:
    event = ProcessExited("chat-1", 42, 1, None, StopReason.STARTUP_FAILURE, 1.0, (), FLAG, WORDS)
    assert describe_event(event).splitlines() == [
        "chat-1  process 42 exited with status 1 (reason: start-up failure)",
        "    why: invalid flag: error: invalid argument: --no-such-flag",
        "    | loading model",
        "    | error: invalid argument: --no-such-flag",
    ]


def test_a_crash_without_a_diagnosis_still_shows_its_last_lines() -> None:
    lines = tuple(f"line {n}" for n in range(9))
    event = ProcessExited("chat-1", 42, None, 11, StopReason.CRASH, 1.0, last_lines=lines)
    text = describe_event(event).splitlines()
    assert text[0] == "chat-1  process 42 killed by SIGSEGV (reason: crash)"
    assert text[1:] == [f"    | line {n}" for n in range(4, 9)]


def test_a_requested_stop_is_one_line() -> None:
    event = ProcessExited("chat-1", 42, None, 15, StopReason.REQUESTED, 1.0, last_lines=WORDS)
    assert describe_event(event) == "chat-1  process 42 killed by SIGTERM (reason: requested)"


def test_giving_up_on_a_config_error_says_so_in_the_servers_words() -> None:
    event = GaveUp("chat-1", 1, f"config-error: {FLAG.describe()}", 2.0)
    assert describe_event(event) == (
        "chat-1  gave up after 1 restart(s): config-error: invalid flag: error: invalid "
        "argument: --no-such-flag"
    )
