"""A starting server's output, read line by line for a fault that will not end it.

mlx_lm.server whose port is taken prints ``OSError: [Errno 98] Address already in use`` and
hangs (issue 9): waiting for its exit, or for the readiness deadline, only wastes time.
`LineWatch` is fed the chunks `ManagedProcess` reads from the server's two pipes, splits
them into lines and reads each with ``_policy.startup_fault.StartupWatch``; the first line
of a `LIVE_FATAL` kind is kept in `LineWatch.fatal` and wakes `wait_fatal`. Nothing else
happens per line: no message, no task switch. Once the server is Running, `stop` ends the
reading, so a healthy server costs one flag test per chunk.
"""

from __future__ import annotations

import attrs
import trio

from .._events import Diagnosis
from .._policy.startup_fault import LIVE_FATAL, StartupWatch

LINE_LIMIT_BYTES = 8192
"""A line longer than this is read in pieces of this size (bytes)."""


@attrs.define(eq=False)
class StreamLines:
    """One stream's pending partial line and its reader; fed by `LineWatch`."""

    _owner: LineWatch
    _watch: StartupWatch = attrs.Factory(StartupWatch)
    _partial: bytearray = attrs.Factory(bytearray)

    def feed(self, chunk: bytes | bytearray) -> None:
        """Read the complete lines ``chunk`` finishes (nothing once the watch stopped); an
        empty ``chunk`` is the end of file: the last line is read, newline or not."""
        if not chunk:
            self.end()
        if not self._owner.active or not chunk:
            return
        self._partial += chunk
        *lines, rest = self._partial.split(b"\n")
        if len(rest) > LINE_LIMIT_BYTES:
            lines.append(rest)
            rest = bytearray()
        self._partial = bytearray(rest)
        for line in lines:
            self._read(bytes(line))

    def end(self) -> None:
        """End of file: read the last line, even without its newline."""
        if self._owner.active and self._partial:
            self._read(bytes(self._partial))
        self._partial = bytearray()

    def _read(self, line: bytes) -> None:
        found = self._watch.feed(line.decode("utf-8", errors="replace"))
        if found is not None and found.kind in LIVE_FATAL:
            self._owner.found(found)


@attrs.define(eq=False)
class LineWatch:
    """The start-up reading of one process's stdout and stderr.

    Attributes:
        active: True until `stop` (the server is Running, or its fault was found).
        fatal: the first `LIVE_FATAL` diagnosis read, else None.
    """

    active: bool = True
    fatal: Diagnosis | None = None
    _seen: trio.Event = attrs.Factory(trio.Event)
    stdout: StreamLines = attrs.field(init=False)
    stderr: StreamLines = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.stdout = StreamLines(self)
        self.stderr = StreamLines(self)

    def found(self, diagnosis: Diagnosis) -> None:
        """Keep the first fatal diagnosis, stop reading and wake `wait_fatal`."""
        if self.fatal is None:
            self.fatal = diagnosis
            self._seen.set()
        self.stop()

    def stop(self) -> None:
        """Read no more lines (the server is Running)."""
        self.active = False

    async def wait_fatal(self) -> Diagnosis:
        """Wait until a line of a `LIVE_FATAL` kind is read; return its diagnosis. Waits
        for ever if none comes (cancel it when the process ends)."""
        await self._seen.wait()
        assert self.fatal is not None
        return self.fatal
