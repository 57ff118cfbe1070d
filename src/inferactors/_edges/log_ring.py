"""A managed server's output as timestamped lines: `LogRing` per instance, `LogBook` for all.

`ManagedProcess` splits its server's stdout and stderr into lines (``output_lines``) and
hands each to the instance's ring, which keeps the last of them (across restarts: the ring
belongs to the instance, each new process appends to it), passes them to every follower,
and, when asked, to a rotating file (``log_file``: a thread writes it, so the event loop
never waits on the disk). A probe's own log line (``_policy/probe_lines``) is counted in
`LogRing.probe_lines`, not kept.

Memory is bounded whatever the servers write: a ring keeps at most
``lines`` lines and ``memory_bytes`` of them (a line counts its text and about
`LINE_OVERHEAD_BYTES` of bookkeeping), and all the rings of a `LogBook` together at most
``total_memory_bytes``: past it, the ring holding the most loses its oldest lines first.
A piece of a line longer than the line cap is a `LogLine` with ``continued`` set. Lines a
server wrote faster than they are read (`_policy/output_pace.py`) are replaced by one
marker line saying how many. `LogRing.tail` costs the lines asked for, not the ring's size.

A follower gets a bounded channel: when it falls behind, lines are dropped for it alone (the
server's reader never waits) and, once it has room again, a marker line says how many.
Timestamps are unix time in float seconds (``time.time``: what an operator compares with
other logs), unlike the trio clock that drives every decision.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import trio

from .._config.config import ManagedConfig
from .._config.server_logs import ServerLogs
from .._policy.output_pace import KEEP_LINES_PER_S
from .log_file import LogFile, read_tail

_log = logging.getLogger(__name__)

FOLLOW_BUFFER = 256
"""Lines a follower may fall behind before lines are dropped for it."""
LINE_OVERHEAD_BYTES = 120
"""What a kept line costs beside its text (its object, time and the ring's slot; measured
with tracemalloc: 112 bytes on CPython 3.11, 64-bit)."""


@attrs.frozen
class LogLine:
    """One line a managed server wrote.

    Attributes:
        at: when it was read, unix time in float seconds.
        stream: ``"stdout"`` or ``"stderr"``.
        pid: the server process that wrote it.
        text: the line, decoded as UTF-8 (undecodable bytes replaced), without its newline.
        continued: the line was longer than the line cap (8 KiB): this is a piece of it,
            and it goes on in the next line of the same stream.
    """

    at: float
    stream: str
    pid: int
    text: str
    continued: bool = False


def dropped_marker(count: int, like: LogLine) -> LogLine:
    """The line a follower gets in place of ``count`` lines it was too slow for."""
    text = f"[inferactors] {count} line(s) dropped here: this reader fell behind"
    return LogLine(like.at, like.stream, like.pid, text)


def flood_text(lines: int, size: int) -> str:
    """The marker's text for ``lines`` lines (``size`` bytes) a server wrote too fast."""
    return (
        f"[inferactors] {lines} line(s) ({size} bytes) of output dropped here: the server "
        f"wrote more than {KEEP_LINES_PER_S:g} lines a second"
    )


def line_cost(line: LogLine) -> int:
    """The memory one kept line is counted for, in bytes."""
    return sys.getsizeof(line.text) + LINE_OVERHEAD_BYTES


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
class MemoryBudget:
    """The memory all the rings of a `LogBook` may take together (``total_bytes``)."""

    total_bytes: int = ServerLogs().total_memory_bytes
    used: int = 0
    rings: list[LogRing] = attrs.Factory(list)

    def trim(self) -> None:
        """Over budget: the ring holding the most loses its oldest lines until it is not."""
        while self.used > self.total_bytes and self.rings:
            largest = max(self.rings, key=lambda ring: ring.memory_bytes)
            if not largest.evict_oldest():
                return


@attrs.define(eq=False)
class LogRing:
    """The last lines of one instance's servers, within its limits, and their followers.

    Attributes:
        size: how many lines are kept at most.
        max_bytes: how much memory they may take at most (`line_cost`).
        memory_bytes: how much they take now.
        probe_lines: lines that were a server's log of our probes, counted and dropped.
        flooded: lines a server wrote faster than they are read, counted and dropped.
    """

    size: int = ServerLogs().lines
    clock: Callable[[], float] = time.time
    file: LogFile | None = None
    max_bytes: int = ServerLogs().memory_bytes
    budget: MemoryBudget = attrs.Factory(MemoryBudget)
    probe_lines: int = 0
    flooded: int = 0
    memory_bytes: int = 0
    _lines: deque[LogLine] = attrs.Factory(deque)
    _followers: list[_Follower] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        if self not in self.budget.rings:
            self.budget.rings.append(self)

    def record(self, stream: str, pid: int, text: str, continued: bool = False) -> None:
        """Keep one line the server ``pid`` wrote on ``stream``; never waits."""
        self._keep(LogLine(self.clock(), stream, pid, text, continued))

    def dropped(self, stream: str, pid: int, lines: int, size: int) -> None:
        """Keep a marker for ``lines`` lines (``size`` bytes) the server wrote too fast."""
        self.flooded += lines
        self._keep(LogLine(self.clock(), stream, pid, flood_text(lines, size)))

    def resume(self, line: LogLine) -> None:
        """Keep ``line``, read back from the file of an earlier supervisor, as it was."""
        self._keep(line)

    def probe(self) -> None:
        """Count a probe's log line (not kept)."""
        self.probe_lines += 1

    def tail(self, lines: int) -> tuple[LogLine, ...]:
        """The last ``lines`` lines kept, oldest first (all of them when fewer); costs the
        lines asked for, not the ring's length."""
        if lines <= 0:
            return ()
        newest = tuple(itertools.islice(reversed(self._lines), lines))
        return newest[::-1]

    def resize(self, logs: ServerLogs) -> None:
        """Take ``logs``' limits (a reload's); the oldest lines go if they no longer fit."""
        self.size, self.max_bytes = logs.lines, logs.memory_bytes
        self.budget.total_bytes = logs.total_memory_bytes
        self._fit()
        self.budget.trim()

    def evict_oldest(self) -> bool:
        """Drop the oldest line; False when there was none."""
        if not self._lines:
            return False
        cost = line_cost(self._lines.popleft())
        self.memory_bytes -= cost
        self.budget.used -= cost
        return True

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

    def end_followers(self) -> None:
        """End every follower's stream (its instance is gone); the ring and its file stay."""
        for follower in self._followers:
            follower.send.close()
        self._followers.clear()

    def close(self) -> None:
        """End every follower's stream and close the file."""
        self.end_followers()
        self.close_file()

    def close_file(self) -> None:
        """Close the file (its writer thread ends once its lines are written); the lines in
        memory and the followers stay. `LogBook.ring` opens it again."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def _keep(self, line: LogLine) -> None:
        self._lines.append(line)
        cost = line_cost(line)
        self.memory_bytes += cost
        self.budget.used += cost
        self._fit()
        if self.budget.used > self.budget.total_bytes:
            self.budget.trim()
        if self.file is not None:
            self.file.write(line)
        if self._followers:
            self._followers = [f for f in self._followers if f.offer(line)]

    def _fit(self) -> None:
        while len(self._lines) > self.size or (
            self.memory_bytes > self.max_bytes and len(self._lines) > 1
        ):
            self.evict_oldest()


@attrs.define(eq=False)
class LogBook:
    """The rings of one supervisor's instances, by instance id, within one memory budget;
    a ring outlives its processes and an unload, so a reloaded instance goes on with its
    history (its file is closed while no actor runs it: `release`)."""

    clock: Callable[[], float] = time.time
    budget: MemoryBudget = attrs.Factory(MemoryBudget)
    _rings: dict[str, LogRing] = attrs.Factory(dict)

    def ring(self, instance_id: str, managed: ManagedConfig | None) -> LogRing:
        """The ring of ``instance_id``, made on first use with ``managed.logs``' limits and
        its file ``data_root/logs/<instance id>.log`` (unless ``logs.file_bytes`` is 0). A
        new ring starts with the file's last lines (what the servers wrote before this
        supervisor started: at most ``logs.lines`` lines from its last ``memory_bytes``
        bytes); a file that cannot be read or opened is logged and leaves the ring without
        those lines or that file."""
        found = self._rings.get(instance_id)
        if found is not None and found.file is None:  # released at its last unload
            logs = ServerLogs() if managed is None else managed.logs
            found.file = _file(instance_id, logs, None if managed is None else managed.data_root)
        if found is None:
            logs = ServerLogs() if managed is None else managed.logs
            data_root = None if managed is None else managed.data_root
            self.budget.total_bytes = logs.total_memory_bytes
            found = LogRing(logs.lines, self.clock, None, logs.memory_bytes, self.budget)
            for line in _earlier(instance_id, logs, data_root):
                found.resume(line)
            found.file = _file(instance_id, logs, data_root)
            self._rings[instance_id] = found
        return found

    def release(self, instance_id: str) -> None:
        """Close the file of ``instance_id``'s ring (its actor ended: unloaded, or its
        runtime closed), keeping its lines: its writer thread and descriptor go, and a
        later `ring` of the same id opens the file again."""
        found = self._rings.get(instance_id)
        if found is not None:
            found.close_file()

    def get(self, instance_id: str) -> LogRing | None:
        """The ring of ``instance_id``, or None when it never had one."""
        return self._rings.get(instance_id)

    def close(self) -> None:
        """Close every ring (their files are flushed and closed)."""
        for ring in self._rings.values():
            ring.close()


def _log_path(data_root: Path, instance_id: str) -> Path:
    return data_root / "logs" / f"{instance_id}.log"


def _earlier(instance_id: str, logs: ServerLogs, data_root: Path | None) -> list[LogLine]:
    if logs.file_bytes <= 0 or data_root is None:
        return []
    path = _log_path(data_root, instance_id)
    try:
        found = read_tail(path, logs.lines, logs.memory_bytes)
    except OSError as error:
        _log.warning("cannot read %s's earlier output in %s: %s", instance_id, path, error)
        return []
    return [LogLine(f.at, f.stream, f.pid, f.text, f.continued) for f in found]


def _file(instance_id: str, logs: ServerLogs, data_root: Path | None) -> LogFile | None:
    if logs.file_bytes <= 0 or data_root is None:
        return None
    path = _log_path(data_root, instance_id)
    try:
        return LogFile.open(path, logs.file_bytes, logs.file_count)
    except OSError as error:
        _log.warning("cannot write %s's output to %s: %s", instance_id, path, error)
        return None  # the ring still keeps the lines; the file is an extra
