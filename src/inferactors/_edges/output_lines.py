"""A starting server's output, read line by line for a fault that will not end it.

mlx_lm.server whose port is taken prints ``OSError: [Errno 98] Address already in use`` and
hangs: waiting for its exit, or for the readiness deadline, only wastes time.
`LineWatch` is fed the chunks `ManagedProcess` reads from the server's two pipes, splits
them into lines and reads each with ``_policy.startup_fault.StartupWatch``; the first line
of a `LIVE_FATAL` kind is kept in `LineWatch.fatal` and wakes `wait_fatal`; a line that says
the server listens or loaded its model (``_policy.ready_lines``) is counted and wakes
`wait_ready`, so the monitor probes at once. Nothing else happens per
line: no message, no task switch. Once the server is Running, `stop` ends that reading.

The same lines feed the process's evidence (`OutputCapture`, fed line by line: every byte
but those of a probe's log line, which are only counted) and the instance's ring of lines
(`LineSink`, ``log_ring``); `read_stream` is the reader task of one pipe. A probe's log line
is ``_policy/probe_lines``' call, so a server logging each probe fills neither.

Bounded whatever the server writes: a line over `LINE_LIMIT_BYTES` is
kept in pieces marked as continued; a process's lines are read one by one only as fast as
its `LinePace` allows (the rest are dropped whole, in C, counted, kept in the evidence's
head and tail bytes, and said by a marker line); once the stream is quiet for `QUIET_S` after
a drop, the marker is said and the last line dropped is read after all (a server's last
words after a flood, often its error, never wait for a next line that may not come); the
pipe is widened to `PIPE_BYTES` and
emptied at once, so the server never waits long on us; and lines are read `SLICE_LINES` at
a time, so the event loop is never held up by one chunk. Dropped lines are not looked at
for start-up faults or readiness (the probes still see the server).
"""

from __future__ import annotations

import fcntl
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from .._policy.output_pace import LinePace
from .._policy.probe_lines import is_probe_line
from .._policy.ready_lines import ready_line
from .._policy.startup_fault import LIVE_FATAL, StartupWatch
from .._stop_reasons import Diagnosis
from .capture import OutputCapture

LINE_LIMIT_BYTES = 8192
"""A line longer than this is kept in pieces of this size (bytes), each but the last
marked as continued (`LineSink.record`)."""

READ_CHUNK_BYTES = 1 << 20
"""The most bytes one read takes from a server's pipe."""
PIPE_BYTES = 1 << 20
"""The size asked for each pipe (``F_SETPIPE_SZ``; Linux's default is 64 KiB): how much a
server may write while the loop is busy elsewhere before its write waits."""
SLICE_LINES = 256
"""Lines read one by one before the reader lets the event loop run other tasks."""
QUIET_S = 0.2
"""How long a stream must be silent after lines were dropped before the drop is said and
its last line read (`StreamLines.settle`), float seconds."""


class LineSink(Protocol):
    """Where a process's lines go besides its evidence (`log_ring.LogRing`)."""

    def record(self, stream: str, pid: int, text: str, continued: bool = False) -> None:
        """Keep one line (without its newline); ``continued``: it is a piece of a longer
        line that goes on in the next record. Must not wait."""
        ...

    def probe(self) -> None:
        """Count one line that was a server's log of our probe."""
        ...

    def dropped(self, stream: str, pid: int, lines: int, size: int) -> None:
        """Say that ``lines`` lines (``size`` bytes) of ``stream`` were not read one by
        one here (the server wrote faster than `LinePace` keeps). Must not wait."""
        ...


@attrs.frozen
class _Line:
    data: bytes
    ending: bytes
    continued: bool = False


@attrs.frozen
class _Drop:
    data: bytes
    lines: int

    @property
    def last(self) -> bytes:
        """The last line dropped (without its newline), or the piece dropped."""
        body = self.data[:-1] if self.data.endswith(b"\n") else self.data
        return body.rsplit(b"\n", 1)[-1]


@attrs.define(eq=False)
class StreamLines:
    """One stream's pending partial line and its readers; fed by `read_stream`.

    A chunk is cut into lines at once (`queue`) and the lines are then read in slices
    (`work`); lines the owner's `LinePace` has no token for are dropped whole, their bytes
    kept in the evidence and counted, and said (`LineSink.dropped`) before the next line
    kept.

    Attributes:
        name: ``"stdout"`` or ``"stderr"``.
        capture: the stream's evidence: every byte but a probe's log lines.
        dropped_lines: how many lines (or pieces of an endless line) were dropped so far.
    """

    _owner: LineWatch
    name: str = "stdout"
    capture: OutputCapture = attrs.Factory(OutputCapture)
    dropped_lines: int = 0
    _watch: StartupWatch = attrs.Factory(StartupWatch)
    _partial: bytearray = attrs.Factory(bytearray)
    _pending: deque[_Line | _Drop] = attrs.Factory(deque)
    _unsaid: tuple[int, int] = (0, 0)
    _tail: bytes | None = None

    @property
    def unsettled(self) -> bool:
        """Whether lines were dropped and not yet said (`settle` says them)."""
        return self._unsaid[0] > 0

    def feed(self, chunk: bytes | bytearray) -> None:
        """`queue` ``chunk`` and read every line it finishes now; an empty ``chunk`` is the
        end of file: the last line is read, newline or not."""
        self.queue(chunk)
        self.work(None)

    def queue(self, chunk: bytes | bytearray) -> None:
        """Cut ``chunk`` into the lines it finishes (kept up to the pace, the rest dropped
        whole) and pieces of an endless line; `work` reads them. Empty: end of file."""
        if not chunk:
            self._finish()
            return
        data = bytes(self._partial + chunk) if self._partial else bytes(chunk)
        self._partial = bytearray()
        lines = data.count(b"\n")
        kept = self._owner.take(lines)
        at = 0
        for _ in range(kept):
            newline = data.index(b"\n", at)
            self._pieces(data[at:newline], b"\n")
            at = newline + 1
        if kept < lines:
            last = data.rindex(b"\n") + 1
            self._pending.append(_Drop(data[at:last], lines - kept))
            at = last
        self._rest(data[at:])

    def work(self, most: int | None) -> bool:
        """Read up to ``most`` pending lines (None: all); whether some are still pending."""
        done = 0
        while self._pending and (most is None or done < most):
            item = self._pending.popleft()
            if isinstance(item, _Drop):
                self.capture.feed(item.data)
                self.dropped_lines += item.lines
                lines, size = self._unsaid
                self._unsaid = (lines + item.lines, size + len(item.data))
                self._tail = item.last
                continue
            self._tail = None  # a later line is read: the marker says the rest
            self._say_dropped()
            self._read(item)
            done += 1
        return bool(self._pending)

    def end(self) -> None:
        """End of file (or of reading): read the last line, even without its newline, and
        whatever is pending; say the lines dropped last (`settle`)."""
        self._finish()
        self.work(None)
        self.settle()

    def settle(self) -> None:
        """The stream went quiet after lines were dropped: say the marker now, for all but
        the last line dropped, and read that one (its bytes are already in the evidence)."""
        tail, self._tail = self._tail, None
        if tail is not None and self.unsettled:
            lines, size = self._unsaid
            self._unsaid = (lines - 1, size - len(tail) - 1)
            self.dropped_lines -= 1
            self._say_dropped()
            self._read(_Line(tail, b"\n"), counted=True)
        self._say_dropped()

    def _finish(self) -> None:
        if self._partial:
            rest, self._partial = bytes(self._partial), bytearray()
            if self._owner.take(1):
                self._pieces(rest, b"")
            else:
                self._pending.append(_Drop(rest, 1))

    def _pieces(self, line: bytes, ending: bytes) -> None:
        """``line`` as pieces of at most `LINE_LIMIT_BYTES`, each but the last continued."""
        for start in range(0, max(len(line) - LINE_LIMIT_BYTES, 0), LINE_LIMIT_BYTES):
            self._pending.append(_Line(line[start : start + LINE_LIMIT_BYTES], b"", True))
        last = (max(len(line) - 1, 0) // LINE_LIMIT_BYTES) * LINE_LIMIT_BYTES
        self._pending.append(_Line(line[last:], ending))

    def _rest(self, rest: bytes) -> None:
        """The unfinished last line: its full pieces now (continued), the rest kept."""
        whole = len(rest) - len(rest) % LINE_LIMIT_BYTES
        if whole and whole == len(rest):
            whole -= LINE_LIMIT_BYTES  # keep a last piece back: the line may end there
        for start in range(0, whole, LINE_LIMIT_BYTES):
            piece = rest[start : start + LINE_LIMIT_BYTES]
            if self._owner.take(1):
                self._pending.append(_Line(piece, b"", True))
            else:
                self._pending.append(_Drop(piece, 1))
        self._partial = bytearray(rest[whole:])

    def _say_dropped(self) -> None:
        lines, size = self._unsaid
        if lines and self._owner.sink is not None:
            self._owner.sink.dropped(self.name, self._owner.pid, lines, size)
        self._unsaid = (0, 0)

    def _read(self, item: _Line, *, counted: bool = False) -> None:
        """Read one line; ``counted``: its bytes are in the evidence already."""
        line, ending = item.data, item.ending
        text = line.decode("utf-8", errors="replace")
        if self._owner.active and not item.continued:
            found = self._watch.feed(text)
            if found is not None and found.kind in LIVE_FATAL:
                self._owner.found(found)
            if ready_line(text) is not None:
                self._owner.ready()
        sink = self._owner.sink
        if not item.continued and is_probe_line(text):
            if not counted:
                self.capture.count(len(line) + len(ending))
            if sink is not None:
                sink.probe()
            return
        if not counted:
            self.capture.feed(line + ending)
        if sink is not None:
            sink.record(self.name, self._owner.pid, text.rstrip("\r"), item.continued)


@attrs.define(eq=False)
class LineWatch:
    """The start-up reading of one process's stdout and stderr.

    Attributes:
        active: True until `stop` (the server is Running, or its fault was found).
        fatal: the first `LIVE_FATAL` diagnosis read, else None.
        sink: where every line goes besides the evidence (the instance's ring), or None.
        pid: the process whose lines these are (set at spawn).
        ready_count: how many readiness lines (listening, model loaded) were read.
    """

    active: bool = True
    fatal: Diagnosis | None = None
    sink: LineSink | None = None
    pid: int = 0
    ready_count: int = 0
    pace: LinePace = attrs.Factory(LinePace)
    clock: Callable[[], float] = time.monotonic
    _seen: trio.Event = attrs.Factory(trio.Event)
    _ready: trio.Event = attrs.Factory(trio.Event)
    stdout: StreamLines = attrs.field(init=False)
    stderr: StreamLines = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.stdout = StreamLines(self, "stdout")
        self.stderr = StreamLines(self, "stderr")

    def take(self, lines: int) -> int:
        """How many of ``lines`` lines may be read one by one now (`LinePace`)."""
        return self.pace.take(self.clock(), lines) if lines else 0

    def found(self, diagnosis: Diagnosis) -> None:
        """Keep the first fatal diagnosis, stop reading and wake `wait_fatal`."""
        if self.fatal is None:
            self.fatal = diagnosis
            self._seen.set()
        self.stop()

    def ready(self) -> None:
        """Count one readiness line and wake every `wait_ready`."""
        self.ready_count += 1
        self._ready.set()
        self._ready = trio.Event()

    async def wait_ready(self, seen: int) -> None:
        """Wait until more than ``seen`` readiness lines were read (at once if they were
        already). Waits for ever if none comes: bound it with a deadline."""
        while self.ready_count <= seen:
            await self._ready.wait()

    def stop(self) -> None:
        """Look for no more faults (the server is Running); lines are still kept."""
        self.active = False

    async def wait_fatal(self) -> Diagnosis:
        """Wait until a line of a `LIVE_FATAL` kind is read; return its diagnosis. Waits
        for ever if none comes (cancel it when the process ends)."""
        await self._seen.wait()
        assert self.fatal is not None
        return self.fatal


async def read_stream(stream: trio.abc.ReceiveStream, lines: StreamLines) -> None:
    """Feed ``stream`` into ``lines`` until end of file: each chunk is cut at once, its
    lines read `SLICE_LINES` at a time with the loop let go between slices, so neither a
    flooding server nor its reader holds up the event loop; after a drop, a stream quiet
    for `QUIET_S` is settled (`StreamLines.settle`); when cancelled (the pipe outlived its
    drain), what is pending and the partial last line are still read."""
    widen_pipe(stream)
    try:
        while True:
            try:
                with trio.move_on_after(QUIET_S if lines.unsettled else math.inf) as quiet:
                    chunk = await stream.receive_some(READ_CHUNK_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if quiet.cancelled_caught:
                lines.settle()
                continue
            lines.queue(chunk)  # b"": end of file, and its last line is read
            while lines.work(SLICE_LINES):
                await trio.lowlevel.checkpoint()
            if not chunk:
                lines.capture.mark_eof()
                return
    finally:
        lines.end()


def widen_pipe(stream: object) -> None:
    """Ask for a `PIPE_BYTES` pipe behind ``stream`` (when it is one): a server's burst then
    lands in the pipe while the loop is busy, instead of making the server wait. Refused
    (over ``/proc/sys/fs/pipe-max-size`` for us, not a pipe, not Linux): left as it is."""
    fileno = getattr(stream, "fileno", None)
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if fileno is None or setsize is None:
        return
    try:
        fcntl.fcntl(fileno(), setsize, PIPE_BYTES)
    except (OSError, ValueError):
        pass  # the default size still works; a burst then waits on us sooner
