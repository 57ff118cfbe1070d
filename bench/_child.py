"""A helper process a benchmark drives by lines: its stdin takes commands, its stdout
answers one JSON object a line; its CPU time and RSS are read from outside (psutil).

Not a benchmark itself; ``bench_adopted.py`` and ``bench_idle.py`` use it. The helpers
(``_fake_farm.py``, ``_adopted_worker.py``, ``_idle_worker.py``) speak the other side with
`read_commands` and `say`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024


@attrs.define
class Child:
    """One running helper: ``python bench/<script> <args>``."""

    process: trio.Process
    _buffer: bytes = b""

    @classmethod
    async def start(cls, script: str, args: Sequence[str]) -> Child:
        """Start ``bench/<script>`` with this interpreter; its stderr is ours."""
        argv = [sys.executable, str(HERE / script), *args]
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return cls(process)

    async def answer(self, timeout_s: float) -> dict[str, Any]:
        """The next JSON line it prints. Raises trio.TooSlowError after ``timeout_s``, and
        RuntimeError when it exits first."""
        assert self.process.stdout is not None
        with trio.fail_after(timeout_s):
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some(65536)
                if not chunk:
                    raise RuntimeError(
                        f"helper exited ({self.process.returncode}) before answering"
                    )
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def ask(self, command: str, timeout_s: float) -> dict[str, Any]:
        """Send ``command`` (one line) and return its answer."""
        assert self.process.stdin is not None
        await self.process.stdin.send_all(command.encode() + b"\n")
        return await self.answer(timeout_s)

    def cpu_s(self) -> float:
        """Its CPU time so far (user + system, every thread; not its children), seconds."""
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    async def cpu_time_s(self) -> float:
        """Its CPU time so far, as it reads it itself (`answer_cpu`): exact to the
        microsecond, where `cpu_s` counts 10 ms clock ticks. Asking wakes it once."""
        return float((await self.ask("cpu", 30))["cpu_s"])

    def rss_mib(self) -> float:
        """Its resident set, MiB."""
        return float(psutil.Process(self.process.pid).memory_info().rss) / MIB

    async def finish(self, timeout_s: float = 30.0) -> None:
        """Close its stdin (its cue to exit), wait ``timeout_s``, then kill it."""
        if self.process.stdin is not None:
            await self.process.stdin.aclose()
        with trio.move_on_after(timeout_s):
            await self.process.wait()
        if self.process.returncode is None:
            print(f"  (helper {self.process.pid} did not exit in {timeout_s} s: killed)")
            self.process.kill()
            await self.process.wait()


async def read_commands() -> AsyncIterator[str]:
    """The helper's side: each line of its stdin, stripped, until EOF."""
    stream = trio.lowlevel.FdStream(os.dup(0))
    buffer = b""
    async with stream:
        while True:
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                yield line.decode().strip()
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            buffer += chunk


def answer_cpu(command: str) -> None:
    """The helper's side of `Child.cpu_time_s`: ``cpu`` is answered with its own CPU time
    (``time.process_time``: every thread, nanosecond clock)."""
    if command == "cpu":
        say(cpu_s=time.process_time())


def say(**fields: Any) -> None:
    """The helper's side: print one JSON answer line."""
    print(json.dumps(fields), flush=True)


def quantile(samples: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0 to 1, nearest rank) of ``samples``; None when empty."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Overshoot:
    """A task's measure of the event loop's lag: how late each 10 ms sleep wakes, seconds."""

    PERIOD_S = 0.010

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def run(self) -> None:
        """Sleep `PERIOD_S` again and again until cancelled, recording each overshoot."""
        while True:
            began = trio.current_time()
            await trio.sleep(self.PERIOD_S)
            self.samples.append(trio.current_time() - began - self.PERIOD_S)

    def summary_ms(self) -> dict[str, float | None]:
        """p50 and p99 in ms (None without samples)."""
        p50, p99 = quantile(self.samples, 0.5), quantile(self.samples, 0.99)
        return {
            "p50": None if p50 is None else p50 * 1e3,
            "p99": None if p99 is None else p99 * 1e3,
        }
