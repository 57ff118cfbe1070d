"""A real ``inferactors run`` process for tests: its output lines read by a thread as
they come, so a test can wait for one while the supervisor runs."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs

from support import own_state_dir_env

WAIT_S = 30.0


@attrs.define(eq=False)
class RunProcess:
    """``inferactors run PATH`` with its stdout and stderr lines collected (both)."""

    process: subprocess.Popen[str]
    lines: list[str] = attrs.Factory(list)
    _queue: queue.Queue[str | None] = attrs.Factory(queue.Queue)

    @classmethod
    def start(cls, path: Path, *flags: str) -> RunProcess:
        """Start it; HOME is the run file's directory, so a run file without
        ``[managed]`` has its state directory (its control socket) to itself."""
        argv = [sys.executable, "-m", "inferactors", "run", str(path), *flags]
        env = own_state_dir_env(path.parent)  # its own state directory (no [managed])
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        return cls.reading(process)

    @classmethod
    def reading(cls, process: subprocess.Popen[str]) -> RunProcess:
        """Collect the lines of ``process`` (its stdout, stderr merged into it)."""
        run = cls(process)
        threading.Thread(target=run._read, daemon=True).start()
        return run

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, needle: str, within_s: float = WAIT_S) -> str:
        """The first line from now on that contains ``needle``."""
        deadline = time.monotonic() + within_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no line with {needle!r}:\n" + "\n".join(self.lines))

    def finish(self, within_s: float = WAIT_S) -> int:
        """Wait for the exit; its status (the rest of the output kept in ``lines``)."""
        try:
            code = self.process.wait(timeout=within_s)
        finally:
            self.process.kill()
        while (line := self._queue.get(timeout=5.0)) is not None:
            self.lines.append(line)
        return code

    def output(self) -> str:
        return "\n".join(self.lines)
