"""A managed server's output as timestamped lines: `LogRing` per instance, `LogBook` for all.

`ManagedProcess` splits its server's stdout and stderr into lines (``output_lines``) and
hands each to the instance's ring, which keeps the last ``lines`` of them (across restarts:
the ring belongs to the instance, each new process appends to it), passes them to every
follower, and, when asked, to a rotating file (``<data_root>/logs/<instance id>.log``, the
standard library's `RotatingFileHandler` fed through a `QueueListener` thread, so the event
loop never waits on the disk). A probe's own log line (``_policy/probe_lines``) is counted
in `LogRing.probe_lines`, not kept.

A follower gets a bounded channel: when it falls behind, lines are dropped for it alone (the
server's reader never waits) and, once it has room again, a marker line says how many.
Timestamps are unix time in float seconds (``time.time``: what an operator compares with
other logs), unlike the trio clock that drives every decision.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import queue
import time
from collections import deque
from collections.abc import Callable, Iterator
from logging.handlers import QueueListener, RotatingFileHandler
from pathlib import Path

import attrs
import trio

from .._config.config import ManagedConfig
from .._config.server_logs import ServerLogs

_log = logging.getLogger(__name__)

FOLLOW_BUFFER = 256
"""Lines a follower may fall behind before lines are dropped for it."""


@attrs.frozen
class LogLine:
    """One line a managed server wrote.

    Attributes:
        at: when it was read, unix time in float seconds.
        stream: ``"stdout"`` or ``"stderr"``.
        pid: the server process that wrote it.
        text: the line, decoded as UTF-8 (undecodable bytes replaced), without its newline.
    """

    at: float
    stream: str
    pid: int
    text: str


def dropped_marker(count: int, like: LogLine) -> LogLine:
    """The line a follower gets in place of ``count`` lines it was too slow for."""
    text = f"[inferactors] {count} line(s) dropped here: this reader fell behind"
    return LogLine(like.at, like.stream, like.pid, text)


@attrs.define(eq=False)
class _Follower:
    send: trio.MemorySendChannel[LogLine]
    dropped: int = 0

    def offer(self, line: LogLine) -> bool:
        """Pass ``line`` on without waiting; False once the reader has gone."""
        try:
            if self.dropped:
                self.send.send_nowait(dropped_marker(self.dropped, line))
                self.dropped = 0
            self.send.send_nowait(line)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True


@attrs.define(eq=False)
class LogFile:
    """The rotating file of one instance's lines; written by a thread, never the loop."""

    path: Path
    _queue: queue.SimpleQueue[logging.LogRecord | None]
    _listener: QueueListener

    @classmethod
    def open(cls, path: Path, max_bytes: int, backups: int) -> LogFile:
        """Append to ``path`` (its directory is made), rotated at ``max_bytes`` bytes with
        ``backups`` older files kept. Raises `OSError` when it cannot be opened."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups)
        handler.setFormatter(logging.Formatter("%(message)s"))
        records: queue.SimpleQueue[logging.LogRecord | None] = queue.SimpleQueue()
        listener = QueueListener(records, handler)
        listener.start()
        return cls(path, records, listener)

    def write(self, line: LogLine) -> None:
        """Queue ``line`` for the writer thread (ISO time, stream, pid, text)."""
        stamp = datetime.datetime.fromtimestamp(line.at).astimezone().isoformat("T", "milliseconds")
        message = f"{stamp} {line.stream} {line.pid} {line.text}"
        self._queue.put_nowait(logging.makeLogRecord({"msg": message, "created": line.at}))

    def close(self) -> None:
        """Write what is queued, stop the thread and close the file (waits for the disk)."""
        self._listener.stop()
        for handler in self._listener.handlers:
            handler.close()


@attrs.define(eq=False)
class LogRing:
    """The last ``size`` lines of one instance's servers, and their followers.

    Attributes:
        size: how many lines are kept.
        probe_lines: lines that were a server's log of our probes, counted and dropped.
    """

    size: int = ServerLogs().lines
    clock: Callable[[], float] = time.time
    file: LogFile | None = None
    probe_lines: int = 0
    _lines: deque[LogLine] = attrs.field(init=False)
    _followers: list[_Follower] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        self._lines = deque(maxlen=self.size)

    def record(self, stream: str, pid: int, text: str) -> None:
        """Keep one line the server ``pid`` wrote on ``stream``; never waits."""
        line = LogLine(self.clock(), stream, pid, text)
        self._lines.append(line)
        if self.file is not None:
            self.file.write(line)
        self._followers = [follower for follower in self._followers if follower.offer(line)]

    def probe(self) -> None:
        """Count a probe's log line (not kept)."""
        self.probe_lines += 1

    def tail(self, lines: int) -> tuple[LogLine, ...]:
        """The last ``lines`` lines kept, oldest first (all of them when fewer)."""
        if lines <= 0:
            return ()
        return tuple(self._lines)[-lines:]

    @contextlib.contextmanager
    def follow(self, buffer: int = FOLLOW_BUFFER) -> Iterator[trio.MemoryReceiveChannel[LogLine]]:
        """Every line from now on, through a channel of ``buffer`` lines; a reader that
        falls behind loses lines (a marker says how many). Leaving the block ends it."""
        send, receive = trio.open_memory_channel[LogLine](buffer)
        follower = _Follower(send)
        self._followers.append(follower)
        try:
            with receive:
                yield receive
        finally:
            send.close()
            if follower in self._followers:
                self._followers.remove(follower)

    def close(self) -> None:
        """End every follower's stream and close the file."""
        for follower in self._followers:
            follower.send.close()
        self._followers.clear()
        if self.file is not None:
            self.file.close()
            self.file = None


@attrs.define(eq=False)
class LogBook:
    """The rings of one runtime's instances, by instance id; a ring outlives its processes
    and an unload, so a reloaded instance goes on with its history."""

    clock: Callable[[], float] = time.time
    _rings: dict[str, LogRing] = attrs.Factory(dict)

    def ring(self, instance_id: str, managed: ManagedConfig | None) -> LogRing:
        """The ring of ``instance_id``, made on first use with ``managed.logs``' size (and
        its file under ``data_root/logs`` when ``logs.file_bytes`` is set; a file that
        cannot be opened is logged and leaves the ring without one)."""
        found = self._rings.get(instance_id)
        if found is None:
            logs = ServerLogs() if managed is None else managed.logs
            data_root = None if managed is None else managed.data_root
            found = LogRing(logs.lines, self.clock, _file(instance_id, logs, data_root))
            self._rings[instance_id] = found
        return found

    def get(self, instance_id: str) -> LogRing | None:
        """The ring of ``instance_id``, or None when it never had one."""
        return self._rings.get(instance_id)

    def close(self) -> None:
        """Close every ring (their files are flushed and closed)."""
        for ring in self._rings.values():
            ring.close()


def _file(instance_id: str, logs: ServerLogs, data_root: Path | None) -> LogFile | None:
    if logs.file_bytes <= 0 or data_root is None:
        return None
    path = data_root / "logs" / f"{instance_id}.log"
    try:
        return LogFile.open(path, logs.file_bytes, logs.file_count)
    except OSError as error:
        _log.warning("cannot write %s's output to %s: %s", instance_id, path, error)
        return None  # the ring still keeps the lines; the file is an extra
