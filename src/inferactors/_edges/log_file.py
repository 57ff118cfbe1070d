"""The rotating file of one instance's output lines: `LogFile`, written by a thread.

``<data_root>/logs/<instance id>.log``: the standard library's `RotatingFileHandler` fed
through a `QueueListener` thread, so the event loop never waits on the disk. Bounded both
ways: the queue holds at most `QUEUE_LINES` lines (a disk slower than a flooding server
loses lines, never memory: the lines that found the queue full are counted and a marker
line says how many where they went missing), and the line's text is formatted in the
writer thread, not on the loop. The file and its rotated copies are created mode 0600 and
the ``logs`` directory 0700: a server's output may hold prompts.

Each line of the file: ``<ISO time with the date and zone> <stream> <pid> <text>``, with
`CONTINUED` after a piece of a line that goes on in the next one. `read_tail` reads the last
lines back (a new supervisor's ring starts with them, so ``inferactors logs`` shows what the
servers wrote before a restart of the supervisor).
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import queue
from logging.handlers import QueueListener, RotatingFileHandler
from pathlib import Path
from typing import Any, Protocol

import attrs

from .line_marks import CONTINUED as CONTINUED

QUEUE_LINES = 1024
"""Lines waiting for the writer thread at most (at most 8 KiB each: 8 MiB at worst)."""
BEHIND = "the disk fell behind"
FILE_MODE = 0o600
DIR_MODE = 0o700


class Line(Protocol):
    """What the file writes of a line (`log_ring.LogLine`)."""

    @property
    def at(self) -> float: ...
    @property
    def stream(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def continued(self) -> bool: ...


class _PrivateRotatingFile(RotatingFileHandler):
    """A rotating file whose every file (the first and each after a rollover) is created
    with `FILE_MODE`, whatever the umask."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(
            self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE
        )
        stream = open(fd, self.mode, encoding=self.encoding, errors=self.errors)  # noqa: SIM115
        assert isinstance(stream, io.TextIOWrapper)  # text mode: "a"
        return stream


class _LineFormat(logging.Formatter):
    """A record whose ``msg`` is a `Line`, as one line of the file (in the writer thread)."""

    def format(self, record: logging.LogRecord) -> str:
        line: Line = record.msg  # type: ignore[assignment]
        stamp = datetime.datetime.fromtimestamp(line.at).astimezone()
        mark = CONTINUED if line.continued else ""
        return f"{stamp.isoformat('T', 'milliseconds')} {line.stream} {line.pid} {line.text}{mark}"


class _Listener(QueueListener):
    """A `QueueListener` whose stop waits for room in the bounded queue for its sentinel
    (the thread is draining it)."""

    def enqueue_sentinel(self) -> None:
        self.queue.put(self._sentinel)  # type: ignore[attr-defined]

    def prepare(self, record: Any) -> logging.LogRecord:
        """The queued `Line` as a record, made in the writer thread (the loop only queues
        the line: a record costs microseconds a line, a flood thousands of lines a second)."""
        return _record(record)


@attrs.frozen
class _Marker:
    """A line the supervisor writes itself, in the shape of a `Line`."""

    at: float
    stream: str
    pid: int
    text: str
    continued: bool = False


@attrs.define(eq=False)
class LogFile:
    """The rotating file of one instance's lines; written by a thread, never the loop.

    Attributes:
        path: the file.
        unwritten: lines lost so far because the writer thread fell `QUEUE_LINES` behind.
    """

    path: Path
    _queue: queue.Queue[Line | None]
    _listener: _Listener
    unwritten: int = 0
    _unsaid: int = 0

    @classmethod
    def open(cls, path: Path, max_bytes: int, backups: int) -> LogFile:
        """Append to ``path`` (its directory is made, 0700), rotated at ``max_bytes`` bytes
        with ``backups`` older files kept, each 0600. Raises `OSError` when it cannot be
        opened."""
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path.parent, DIR_MODE)
        handler = _PrivateRotatingFile(path, maxBytes=max_bytes, backupCount=backups)
        handler.setFormatter(_LineFormat())
        records: queue.Queue[Line | None] = queue.Queue(QUEUE_LINES)
        listener = _Listener(records, handler)
        listener.start()
        return cls(path, records, listener)

    def write(self, line: Line) -> None:
        """Queue ``line`` for the writer thread; never waits. A full queue loses it (counted);
        the next line that fits is preceded by a marker saying how many were lost."""
        try:
            if self._unsaid:
                text = f"[inferactors] {self._unsaid} line(s) not written here: {BEHIND}"
                self._queue.put_nowait(_Marker(line.at, line.stream, line.pid, text))
                self._unsaid = 0
            self._queue.put_nowait(line)  # made a record in the writer thread, not here
        except queue.Full:
            self.unwritten += 1
            self._unsaid += 1

    def close(self) -> None:
        """Write what is queued, stop the thread and close the file (waits for the disk)."""
        self._listener.stop()
        for handler in self._listener.handlers:
            handler.close()


@attrs.frozen
class FileLine:
    """A line read back from the file, in the shape of a `Line` (``log_ring.LogLine``)."""

    at: float
    stream: str
    pid: int
    text: str
    continued: bool = False


def read_tail(path: Path, lines: int, max_bytes: int) -> list[FileLine]:
    """The last ``lines`` lines of the file at ``path`` (oldest first), read from at most
    its last ``max_bytes`` bytes; a line not in the file's shape (cut by that limit, or
    written by something else) is skipped. Empty when the file does not exist.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return []
    with handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - max_bytes))
        data = handle.read(max_bytes)
    parsed = (_parse(raw) for raw in data.decode("utf-8", errors="replace").splitlines())
    kept = [line for line in parsed if line is not None]
    return kept[-lines:] if lines > 0 else []


def _parse(raw: str) -> FileLine | None:
    parts = raw.split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr") or not parts[2].isdigit():
        return None
    try:
        at = datetime.datetime.fromisoformat(parts[0]).timestamp()
    except ValueError:
        return None
    text = parts[3] if len(parts) == 4 else ""
    continued = text.endswith(CONTINUED)
    text = text[: -len(CONTINUED)] if continued else text
    return FileLine(at, parts[1], int(parts[2]), text, continued)


def _record(line: Line) -> logging.LogRecord:
    return logging.makeLogRecord({"msg": line, "created": line.at})
