"""What a finished server process leaves behind: its captured output and its run evidence.

Pure values and pure logic, no I/O: `OutputCapture` folds the chunks a reader task receives
into a bounded record, `describe_exit` splits a returncode, and `RunEvidence` is the frozen
record that `ManagedProcess` (in ``process.py``) hands back when a process is gone.

The first 1 MiB of each stream is kept and the total is counted. A 4 KiB tail of each
stream is kept as well, because a crashing server prints its reason last.
"""

from __future__ import annotations

import signal as _signal
from typing import Any

import attrs
import blake3

HEAD_LIMIT_BYTES = 1 << 20
"""How many leading bytes of each stream are kept (1 MiB)."""

TAIL_LIMIT_BYTES = 4096
"""How many trailing bytes of each stream are kept for display (4 KiB)."""


def describe_exit(returncode: int) -> tuple[int | None, int | None]:
    """Split a returncode into ``(exit_code, signal)``.

    Args:
        returncode: As reported by the OS wrapper: ``>= 0`` is an exit status, ``-N`` means
            signal ``N`` killed the process (the `subprocess` convention).

    Returns:
        ``(returncode, None)`` for an exit, ``(None, N)`` for a signal. A status such as 143
        (a program that exits with ``128 + SIGTERM`` itself, as mlx_lm.server does) stays an
        exit status: only the OS knows whether a signal did the killing.
    """
    if returncode < 0:
        return None, -returncode
    return returncode, None


def signal_name(signum: int) -> str:
    """``"SIGTERM"`` for 15; ``"signal 99"`` for a number the platform has no name for."""
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@attrs.define(eq=False)
class OutputCapture:
    """Bounded record of one output stream: its head, its total size and its tail.

    Feed it every chunk in order with `feed`; call `mark_eof` when the stream ended. Memory
    stays below ``head_limit + 2 * tail_limit`` bytes whatever the stream's size.
    """

    head_limit: int = HEAD_LIMIT_BYTES
    tail_limit: int = TAIL_LIMIT_BYTES
    total: int = 0
    skipped: int = 0  # bytes counted in `total` but not kept (a probe's log lines)
    eof: bool = False
    _head: bytearray = attrs.field(factory=bytearray)
    _tail: bytearray = attrs.field(factory=bytearray)

    def feed(self, chunk: bytes | bytearray) -> None:
        """Account for ``chunk``, the next bytes read from the stream."""
        self.total += len(chunk)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
        self._tail += chunk[-self.tail_limit :] if self.tail_limit else b""
        excess = len(self._tail) - self.tail_limit
        if excess > 0:
            del self._tail[:excess]

    def count(self, size: int) -> None:
        """Account for ``size`` bytes of the stream that are not kept (head nor tail)."""
        self.total += size
        self.skipped += size

    def mark_eof(self) -> None:
        """Record that the stream reached end of file (every writer closed it)."""
        self.eof = True

    @property
    def head(self) -> bytes:
        """The first ``head_limit`` bytes of the stream (all of it when not truncated)."""
        return bytes(self._head)

    @property
    def truncated(self) -> bool:
        """True when the stream's kept bytes were more than ``head_limit``."""
        return self.total - self.skipped > self.head_limit

    @property
    def tail_text(self) -> str:
        """The last ``tail_limit`` bytes, decoded as UTF-8 with ``errors="replace"``.

        When the tail starts inside the stream, continuation bytes of a character cut in half
        are dropped rather than shown as a replacement character.
        """
        tail = bytes(self._tail)
        if self.total - self.skipped > len(tail):
            tail = _drop_leading_continuations(tail)
        return tail.decode("utf-8", errors="replace")


def _drop_leading_continuations(data: bytes) -> bytes:
    """Strip up to three leading UTF-8 continuation bytes (``0b10xxxxxx``)."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:]


REPR_LINE_CHARS = 120
"""How much of a tail's last line `RunEvidence`'s repr shows (characters)."""


def _kept_repr(kept: bytes) -> str:
    return f"<{len(kept)} bytes kept>"


def _tail_repr(tail: str) -> str:
    """The last non-empty line of ``tail`` as a repr, cut to `REPR_LINE_CHARS` (``...``
    in front when lines come before it or it was cut)."""
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return "''"
    last = lines[-1]
    cut = len(last) > REPR_LINE_CHARS
    shown = repr(last[-REPR_LINE_CHARS:] if cut else last)
    return f"...{shown}" if cut or len(lines) > 1 else shown


@attrs.frozen
class RunEvidence:
    """What one run of a managed process left behind, built once the process is gone.

    Its repr is a summary, a line long whatever the process wrote: the kept output shows
    as its size (``stderr=<2488 bytes kept>``) and each tail as its last line, cut to
    `REPR_LINE_CHARS`; the attributes hold every byte kept. Its `str` is shorter still,
    for a person: ``pid 42 exited with status 0 after 1.50 s; wrote 3145728 + 5543 bytes
    (stdout + stderr); last: 'srv operator(): cleaning up before exit...'``.

    Attributes:
        args: The arguments the program ran with, without the program itself (the reference's
            evidence records the args, not the binary).
        pid: The leader's process id (0 for `empty` evidence).
        exit_code: The exit status when the process exited on its own, else None.
        signal: The signal number when a signal killed the process, else None.
        elapsed_s: Seconds from spawn to the moment the exit was noticed (trio clock).
        stdout: The first 1 MiB of standard output (`HEAD_LIMIT_BYTES`).
        stderr: The first 1 MiB of standard error.
        stdout_bytes: Total bytes written to standard output, kept or not.
        stderr_bytes: Total bytes written to standard error, kept or not.
        truncated: True when either stream was longer than 1 MiB.
        stdout_tail: The last 4 KiB of standard output, decoded for display.
        stderr_tail: The last 4 KiB of standard error, decoded for display.
        runtime: The adapter id that ran the process (set by the caller, see `owned_by`).
        instance_id: The instance the process served (set by the caller).
        killed_after_grace: True when a stop had to send SIGKILL because the leader was still
            alive after its grace period, or because the stop was cancelled.
        output_eof: False when a pipe was still open 2 s after the exit: something that left
            the process group kept the server's stdout or stderr open.
        escaped: Descendants that had left the process group (a ``setsid`` wrapper's
            server, a daemonized grandchild), tracked by pid and stopped with the group.
        killed: Those of them still alive when the SIGKILL went out: they survived the
            grace of a stop (or outlived a leader that exited on its own) and were killed.
        survivors: Those still alive even after the SIGKILL: the stop was not clean.
    """

    args: tuple[str, ...]
    pid: int
    exit_code: int | None
    signal: int | None
    elapsed_s: float
    stdout: bytes = attrs.field(repr=_kept_repr)
    stderr: bytes = attrs.field(repr=_kept_repr)
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    stdout_tail: str = attrs.field(repr=_tail_repr)
    stderr_tail: str = attrs.field(repr=_tail_repr)
    runtime: str = ""
    instance_id: str = ""
    killed_after_grace: bool = False
    output_eof: bool = True
    escaped: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.pid == 0:
            return "no process"
        if self.signal is not None:
            ended = f"was killed by signal {self.signal}"
        elif self.exit_code is not None:
            ended = f"exited with status {self.exit_code}"
        else:
            ended = "ended"
        said = f"{self.stdout_bytes} + {self.stderr_bytes} bytes (stdout + stderr)"
        last = _tail_repr(self.stderr_tail or self.stdout_tail).lstrip(".")
        return f"pid {self.pid} {ended} after {self.elapsed_s:.2f} s; wrote {said}; last: {last}"

    @classmethod
    def empty(cls, *, runtime: str = "", instance_id: str = "") -> RunEvidence:
        """Evidence of no process at all (an Ollama stop, which has no process of ours)."""
        return cls(
            args=(),
            pid=0,
            exit_code=None,
            signal=None,
            elapsed_s=0.0,
            stdout=b"",
            stderr=b"",
            stdout_bytes=0,
            stderr_bytes=0,
            truncated=False,
            stdout_tail="",
            stderr_tail="",
            runtime=runtime,
            instance_id=instance_id,
        )

    @classmethod
    def from_run(
        cls,
        *,
        args: tuple[str, ...],
        pid: int,
        returncode: int | None,
        elapsed_s: float,
        stdout: OutputCapture,
        stderr: OutputCapture,
        killed_after_grace: bool = False,
        escaped: tuple[int, ...] = (),
        killed: tuple[int, ...] = (),
        survivors: tuple[int, ...] = (),
    ) -> RunEvidence:
        """Evidence from a run's returncode (None: never reaped) and its two captures."""
        exit_code, signum = (None, None) if returncode is None else describe_exit(returncode)
        return cls(
            args=args,
            pid=pid,
            exit_code=exit_code,
            signal=signum,
            elapsed_s=elapsed_s,
            stdout=stdout.head,
            stderr=stderr.head,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            truncated=stdout.truncated or stderr.truncated,
            stdout_tail=stdout.tail_text,
            stderr_tail=stderr.tail_text,
            killed_after_grace=killed_after_grace,
            output_eof=stdout.eof and stderr.eof,
            escaped=escaped,
            killed=killed,
            survivors=survivors,
        )

    def owned_by(self, runtime: str, instance_id: str) -> RunEvidence:
        """A copy stamped with the adapter id and instance id (the reference's stop does so)."""
        return attrs.evolve(self, runtime=runtime, instance_id=instance_id)

    def describe(self) -> str:
        """One phrase for logs and status details.

        Returns:
            ``"exited with status 0"``, ``"killed by SIGTERM"``, ``"killed by SIGKILL after
            the grace period"`` or ``"exit status unknown"`` (no status was collected);
            then, for the descendants outside its group, ``"; process 123 (outside its
            group) survived; killed"`` and ``"; but process 124 (outside its group) is
            still running after SIGKILL"`` (`outside_words`).
        """
        if self.signal is not None:
            text = f"killed by {signal_name(self.signal)}"
        elif self.exit_code is not None:
            text = f"exited with status {self.exit_code}"
        else:
            text = "exit status unknown"
        text = f"{text} after the grace period" if self.killed_after_grace else text
        if self.killed:
            text += f"; {outside_words(self.killed, killed=True)}"
        if self.survivors:
            text += f"; but {outside_words(self.survivors, killed=False)}"
        return text

    def audit(self) -> dict[str, Any]:
        """A summary for audit logs, without any output content.

        Returns:
            A JSON-ready dict: runtime, instance_id, args (list), pid, exit_code, signal,
            elapsed_s, stdout_bytes, stderr_bytes, truncated, killed_after_grace, output_eof,
            and ``stdout_blake3`` / ``stderr_blake3``: BLAKE3 hex digests of the kept bytes
            (`stdout` / `stderr`), so the output can be matched without being logged.
        """
        return {
            "runtime": self.runtime,
            "instance_id": self.instance_id,
            "args": list(self.args),
            "pid": self.pid,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "elapsed_s": self.elapsed_s,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "truncated": self.truncated,
            "killed_after_grace": self.killed_after_grace,
            "output_eof": self.output_eof,
            "escaped": list(self.escaped),
            "killed": list(self.killed),
            "survivors": list(self.survivors),
            "stdout_blake3": blake3.blake3(self.stdout).hexdigest(),
            "stderr_blake3": blake3.blake3(self.stderr).hexdigest(),
        }


def outside_words(pids: tuple[int, ...], killed: bool, where: str = "outside its group") -> str:
    """Descendants outside a server's group (or ``where`` else), in words: ``"process 123
    (outside its group) survived; killed"`` (``killed``), else ``"process 123 (outside its
    group) is still running after SIGKILL"``; ``"processes 123, 124 ..."`` for several."""
    what = "process" if len(pids) == 1 else "processes"
    listed = f"{what} {', '.join(map(str, pids))} ({where})"
    if killed:
        return f"{listed} survived; killed"
    return f"{listed} {'is' if len(pids) == 1 else 'are'} still running after SIGKILL"
