"""One name per instance where a person reads, and dated events (issue 19 item 3): the run's
log names an instance by its role (the id stays in the JSON log's ``instance`` field), an
adopted server going away is a warning, and every event carries the wall clock beside
its monotonic ``at``."""

from __future__ import annotations

import io
import json
import logging
import time

from inferactors._cli.logging_setup import configure_logging, event_level, log_event
from inferactors._events import GaveUp, ProcessExited, StateChanged
from inferactors._status import InstanceState
from inferactors._stop_reasons import StopReason

IID = "other-2296ddba-workstation"
GONE = StateChanged(IID, InstanceState.RUNNING, InstanceState.EXITED, "unreachable", 8.0)


def test_the_log_names_the_role_and_the_json_keeps_the_id() -> None:
    text, lines = io.StringIO(), io.StringIO()
    configure_logging("text", stream=text)
    log_event(GaveUp(IID, 2, "restart budget spent", 3.0), "other")
    configure_logging("json", stream=lines)
    log_event(GaveUp(IID, 2, "restart budget spent", 3.0), "other")
    configure_logging("text")
    assert "  other  gave up after 2 restart(s)" in text.getvalue()
    assert IID not in text.getvalue()
    item = json.loads(lines.getvalue())
    assert (item["instance"], item["role"]) == (IID, "other")
    assert item["msg"].startswith("other  gave up")


def test_an_adopted_server_going_away_is_a_warning() -> None:
    assert event_level(GONE, adopted=True) == logging.WARNING
    assert event_level(GONE, adopted=False) == logging.INFO  # a managed exit says why itself
    back = StateChanged(IID, InstanceState.EXITED, InstanceState.RUNNING, "server up", 9.0)
    assert event_level(back, adopted=True) == logging.INFO


def test_every_event_is_dated_by_the_wall_clock_beside_its_monotonic_time() -> None:
    before = time.time()
    event = ProcessExited(IID, 4242, 1, None, StopReason.CRASH, 12.5)
    assert event.at == 12.5
    assert before <= event.wall_time <= time.time()
    # the wall clock is when it was made, not part of what it says: equal events stay equal
    assert event == ProcessExited(IID, 4242, 1, None, StopReason.CRASH, 12.5, wall_time=0.0)


def test_an_adopted_server_gone_reads_gone_not_exited() -> None:
    text = io.StringIO()
    configure_logging("text", stream=text)
    log_event(GONE, "other", adopted=True)
    back = StateChanged(IID, InstanceState.EXITED, InstanceState.RUNNING, "server up", 9.0)
    log_event(back, "other", adopted=True)
    log_event(GONE, "chat", adopted=False)  # a managed server's exit is an exit
    configure_logging("text")
    lines = text.getvalue().splitlines()
    assert "WARNING" in lines[0]
    assert lines[0].endswith("other  running -> gone (unreachable)")
    assert lines[1].endswith("other  gone -> running (server up)")
    assert lines[2].endswith("chat  running -> exited (unreachable)")
