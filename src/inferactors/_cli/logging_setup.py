"""How ``inferactors run`` logs: stdlib logging, as text or JSON lines, flushed per line.

`add_logging_arguments` gives a command ``--log-format text|json`` and ``--log-level``;
`configure_logging` puts one handler on the ``inferactors`` logger, writing to stdout.
`say` and `log_event` are what the command logs through.

- text: ``2025-03-05T17:38:57.380+01:00  INFO     <message>``: ISO 8601 with the date,
  milliseconds and the UTC offset, the level, then the message as the CLI always worded it
  (a failed server's last lines follow on indented lines of the same record).
- json: one object per line: ``ts`` (the same ISO time), ``level``, ``logger``, ``msg``,
  and the record's structured fields (``instance``: the instance id, ``role``: its name,
  ``event``: the event's type), made with the standard library's ``json``.

`logging.StreamHandler` flushes after every record, so a pipe (systemd's journal, ``tee``,
a test) gets each line as it happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from typing import Any, TextIO

from .._events import (
    Event,
    EventsLost,
    ExposureDetected,
    GaveUp,
    ImpostorDetected,
    InstanceCrashed,
    ModelTampered,
    ProcessExited,
    StateChanged,
    SupervisorOverloaded,
    instance_of,
)
from .._status import InstanceState
from .._stop_reasons import StopReason
from .output import describe_event

LOGGER = "inferactors"
FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

_RECORD_KEYS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
"""A plain record's attributes: anything else on a record is a structured field."""

run_log = logging.getLogger(f"{LOGGER}.run")


def iso_time(created: float) -> str:
    """Unix time ``created`` as local ISO 8601 with date, milliseconds and UTC offset."""
    moment = datetime.datetime.fromtimestamp(created).astimezone()
    return moment.isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``<ISO time>  <LEVEL>  <message>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{iso_time(record.created)}  {record.levelname:<7}  {record.getMessage()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg and the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        item: dict[str, Any] = {
            "ts": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_KEYS and not key.startswith("_"):
                item[key] = value
        if record.exc_info:
            item["exc"] = self.formatException(record.exc_info)
        return json.dumps(item, default=str, ensure_ascii=False)


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json`` (default text) and ``--log-level`` (default info)."""
    parser.add_argument(
        "--log-format", choices=FORMATS, default="text", help="text lines or JSON lines"
    )
    parser.add_argument("--log-level", choices=LEVELS, default="info", help="the least level shown")


def configure_logging(
    log_format: str = "text", level: str = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Send the ``inferactors`` loggers' records to ``stream`` (stdout by default), one
    flushed line each, replacing a handler an earlier call put there; returns the handler."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if getattr(h, "_inferactors", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler._inferactors = True  # type: ignore[attr-defined]  # marks ours for replacement
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return handler


def say(message: str, *, instance: str | None = None, level: int = logging.INFO) -> None:
    """Log one line of the run's own (not an event)."""
    fields = {} if instance is None else {"instance": instance}
    run_log.log(level, "%s", message, extra=fields)


def log_event(event: Event, name: str | None = None, adopted: bool = False) -> None:
    """Log ``event`` in the CLI's words, naming its instance by ``name`` (its role; the
    instance id when None), at its level (``adopted``: the instance is an adopted server),
    with its type, instance id and name (``role``) as structured fields."""
    iid = instance_of(event)
    fields: dict[str, str] = {"event": type(event).__name__}
    if iid is not None:
        fields |= {"instance": iid, "role": name or iid}
    level = event_level(event, adopted)
    run_log.log(level, "%s", describe_event(event, name, adopted), extra=fields)


def event_level(event: Event, adopted: bool = False) -> int:
    """WARNING for a crash, an exposure, an impostor, a tampered model, a give-up, an
    overloaded supervisor, or an adopted server gone (``adopted``: its state changed to
    Exited: it no longer answers); else INFO."""
    alarming = (
        GaveUp,
        ExposureDetected,
        ImpostorDetected,
        InstanceCrashed,
        ModelTampered,
        SupervisorOverloaded,
        EventsLost,
    )
    if isinstance(event, alarming):
        return logging.WARNING
    if isinstance(event, ProcessExited) and event.reason is StopReason.CRASH:
        return logging.WARNING
    if adopted and isinstance(event, StateChanged) and event.new is InstanceState.EXITED:
        return logging.WARNING
    return logging.INFO
