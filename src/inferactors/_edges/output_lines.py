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
"""

from __future__ import annotations

from typing import Protocol

import attrs
import trio

from .._events import Diagnosis
from .._policy.probe_lines import is_probe_line
from .._policy.ready_lines import ready_line
from .._policy.startup_fault import LIVE_FATAL, StartupWatch
from .capture import OutputCapture

LINE_LIMIT_BYTES = 8192
"""A line longer than this is read in pieces of this size (bytes)."""

_READ_CHUNK_BYTES = 65536


class LineSink(Protocol):
    """Where a process's lines go besides its evidence (`log_ring.LogRing`)."""

    def record(self, stream: str, pid: int, text: str) -> None:
        """Keep one line (without its newline); must not wait."""
        ...

    def probe(self) -> None:
        """Count one line that was a server's log of our probe."""
        ...


@attrs.define(eq=False)
class StreamLines:
    """One stream's pending partial line and its readers; fed by `read_stream`.

    Attributes:
        name: ``"stdout"`` or ``"stderr"``.
        capture: the stream's evidence: every byte but a probe's log lines.
    """

    _owner: LineWatch
    name: str = "stdout"
    capture: OutputCapture = attrs.Factory(OutputCapture)
    _watch: StartupWatch = attrs.Factory(StartupWatch)
    _partial: bytearray = attrs.Factory(bytearray)

    def feed(self, chunk: bytes | bytearray) -> None:
        """Read the complete lines ``chunk`` finishes; an empty ``chunk`` is the end of
        file: the last line is read, newline or not."""
        if not chunk:
            self.end()
            return
        self._partial += chunk
        *lines, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        for line in lines:
            self._read(bytes(line))
        if len(self._partial) > LINE_LIMIT_BYTES:
            self.end()  # an endless line is read, and kept, in pieces

    def end(self) -> None:
        """End of file (or of reading): read the last line, even without its newline."""
        if self._partial:
            line, self._partial = bytes(self._partial), bytearray()
            self._read(line, ending=b"")

    def _read(self, line: bytes, ending: bytes = b"\n") -> None:
        text = line.decode("utf-8", errors="replace")
        if self._owner.active:
            found = self._watch.feed(text)
            if found is not None and found.kind in LIVE_FATAL:
                self._owner.found(found)
            if ready_line(text) is not None:
                self._owner.ready()
        sink = self._owner.sink
        if is_probe_line(text):
            self.capture.count(len(line) + len(ending))
            if sink is not None:
                sink.probe()
            return
        self.capture.feed(line + ending)
        if sink is not None:
            sink.record(self.name, self._owner.pid, text.rstrip("\r"))


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
    _seen: trio.Event = attrs.Factory(trio.Event)
    _ready: trio.Event = attrs.Factory(trio.Event)
    stdout: StreamLines = attrs.field(init=False)
    stderr: StreamLines = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.stdout = StreamLines(self, "stdout")
        self.stderr = StreamLines(self, "stderr")

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
    """Feed ``stream`` into ``lines`` until end of file; when cancelled (the pipe outlived
    its drain), the partial last line is still read."""
    try:
        while True:
            try:
                chunk = await stream.receive_some(_READ_CHUNK_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            lines.feed(chunk)  # b"": end of file, and its last line is read
            if not chunk:
                lines.capture.mark_eof()
                return
    finally:
        lines.end()
