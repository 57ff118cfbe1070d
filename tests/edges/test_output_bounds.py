"""A server's output is bounded end to end (issue 18 item 2): a ring keeps at most its
memory budget and all rings together theirs; a line over the cap is kept in pieces marked
as continued; lines written faster than they are read are dropped whole with a counted
marker, their bytes still in the evidence; the reader lets the event loop run between
slices; the log file is private and its queue bounded, a lost line said by a marker.

Real processes where the behaviour is a process's: the kit's fake llama-server flooding
7 MB at start-up in 200 KiB lines, and a Python program flooding short lines. What a flood
costs in time (loop lag, the server's blocked writes, supervisor RSS) is measured by
``bench/bench_log_flood.py``, not here.
"""

from __future__ import annotations

import json
import logging
import queue
import stat
import threading
import time
from pathlib import Path

import attrs
import trio
import trio.testing

from edges.process_support import PATH_ENV, Launch
from inferactors._config.config import ManagedConfig
from inferactors._config.server_logs import ServerLogs
from inferactors._edges.log_file import (
    CONTINUED,
    QUEUE_LINES,
    Line,
    LogFile,
    _LineFormat,
    _Listener,
)
from inferactors._edges.log_ring import LogBook, LogLine, LogRing, line_cost
from inferactors._edges.output_lines import LINE_LIMIT_BYTES, SLICE_LINES, LineWatch, read_stream
from inferactors._edges.process import ManagedProcess
from inferactors._policy.output_pace import KEEP_BURST_LINES, LinePace
from inferactors.testing import FakeServerFaults
from inferactors.testing._fake_launch import fake_server_argv
from inferactors.testing._fake_processes import free_port
from inferactors.testing._workspace import importable_paths

KiB = 1024
MiB = 1024 * KiB


@attrs.define
class Sink:
    """A `LineSink` that keeps what it is told."""

    lines: list[tuple[str, str, bool]] = attrs.Factory(list)
    drops: list[tuple[str, int, int]] = attrs.Factory(list)
    probes: int = 0

    def record(self, stream: str, pid: int, text: str, continued: bool = False) -> None:
        self.lines.append((stream, text, continued))

    def probe(self) -> None:
        self.probes += 1

    def dropped(self, stream: str, pid: int, lines: int, size: int) -> None:
        self.drops.append((stream, lines, size))


def test_a_200_kib_line_is_kept_in_pieces_each_but_the_last_continued() -> None:
    sink = Sink()
    watch = LineWatch(sink=sink)
    line = b"".join(bytes([65 + n % 26]) * KiB for n in range(200))
    for start in range(0, len(line), 3000):  # arriving in odd chunks
        watch.stderr.feed(line[start : start + 3000])
    watch.stderr.feed(b"\nafter\n")
    pieces = [(text, continued) for _, text, continued in sink.lines]
    assert len(pieces) == 200 * KiB // LINE_LIMIT_BYTES + 1
    assert all(continued for _, continued in pieces[:-2])
    assert pieces[-2][1] is False
    assert pieces[-1] == ("after", False)
    assert all(len(text) <= LINE_LIMIT_BYTES for text, _ in pieces)
    assert "".join(text for text, _ in pieces[:-1]).encode() == line
    assert watch.stderr.capture.total == len(line) + len(b"\nafter\n")


def test_lines_beyond_the_pace_are_dropped_whole_and_said_once() -> None:
    sink = Sink()
    now = [100.0]
    watch = LineWatch(sink=sink, pace=LinePace(rate_per_s=10, burst=50), clock=lambda: now[0])
    flood = b"".join(b"flood %6d\n" % n for n in range(10_000))
    watch.stdout.feed(flood)
    assert len(sink.lines) == 50
    assert sink.drops == []  # said before the next kept line
    now[0] += 1.0  # ten more tokens
    watch.stdout.feed(b"the server's last words\n")
    assert sink.drops == [("stdout", 9950, len(flood) - 50 * 13)]
    assert sink.lines[-1] == ("stdout", "the server's last words", False)
    capture = watch.stdout.capture
    assert capture.total == len(flood) + len(b"the server's last words\n")  # every byte seen
    assert capture.tail_text.endswith("the server's last words\n")
    assert watch.stdout.dropped_lines == 9950


def test_the_pace_refills_at_its_rate_up_to_its_burst() -> None:
    pace = LinePace(rate_per_s=100, burst=300)
    assert pace.take(0.0, 1000) == 300
    assert pace.take(0.5, 1000) == 50
    assert pace.take(0.5, 1000) == 0
    assert pace.take(60.0, 1000) == 300  # never more than the burst
    assert pace.take(61.0, 7) == 7


def test_a_ring_keeps_its_memory_budget_and_the_book_its_total() -> None:
    logs = ServerLogs(lines=100_000, memory_bytes=256 * KiB, total_memory_bytes=400 * KiB)
    managed = ManagedConfig(registry=Path("/r.json"), data_root=Path("/nonexistent"), logs=logs)
    book = LogBook()
    one, two = book.ring("one", managed), book.ring("two", managed)
    for n in range(5000):
        one.record("stderr", 1, f"one {n} " + "x" * 200)
    assert one.memory_bytes <= 256 * KiB
    assert one.tail(1)[0].text.startswith("one 4999 ")
    for n in range(5000):
        two.record("stderr", 2, f"two {n} " + "y" * 200)
    assert one.memory_bytes + two.memory_bytes <= 400 * KiB
    assert book.budget.used == one.memory_bytes + two.memory_bytes
    assert two.tail(1)[0].text.startswith("two 4999 ")
    kept = one.tail(100_000)
    assert sum(line_cost(line) for line in kept) == one.memory_bytes
    one.resize(ServerLogs(lines=10))
    assert len(one.tail(100)) == 10


def test_tail_costs_the_lines_asked_for() -> None:
    ring = LogRing(1_000_000, max_bytes=1 << 30)
    for n in range(200_000):
        ring.record("stdout", 1, f"{n}")
    assert [line.text for line in ring.tail(3)] == ["199997", "199998", "199999"]
    assert ring.tail(0) == ()


async def test_the_reader_lets_the_loop_run_between_slices() -> None:
    sink = Sink()
    watch = LineWatch(sink=sink)
    send, receive = trio.testing.memory_stream_one_way_pair()
    lines = KEEP_BURST_LINES // 2
    ticks = 0

    async def other_task() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await send.send_all(b"".join(b"line %d\n" % n for n in range(lines)))
        await send.aclose()
        await read_stream(receive, watch.stdout)
        nursery.cancel_scope.cancel()
    assert len(sink.lines) == lines
    assert ticks >= lines // SLICE_LINES - 1  # the other task ran between the slices


def test_the_log_file_is_private_and_its_queue_bounded(tmp_path: Path) -> None:
    """A writer thread held up (a stalled disk): lines past the queue are counted, never
    held in memory, and a marker says how many once the disk is back."""
    path = tmp_path / "logs" / "chat.log"
    file = LogFile.open(path, 1 * MiB, 2)
    file.write(LogLine(1.0, "stderr", 7, "first"))
    file.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stalled = threading.Event()
    written: list[str] = []

    class Stalled(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stalled.wait()
            written.append(_LineFormat().format(record))

    records: queue.Queue[Line | None] = queue.Queue(QUEUE_LINES)
    slow = LogFile(path, records, _Listener(records, Stalled()))
    slow._listener.start()
    for n in range(QUEUE_LINES + 50):
        slow.write(LogLine(2.0, "stderr", 7, f"line {n}", continued=n == 0))
    assert 49 <= slow.unwritten <= 50  # the thread took at most one before it stalled
    stalled.set()
    deadline = time.monotonic() + 10
    while not records.empty() and time.monotonic() < deadline:
        time.sleep(0.01)  # the disk is back: the queue drains
    slow.write(LogLine(3.0, "stderr", 7, "after"))
    slow.close()
    assert written[0].endswith(f" stderr 7 line 0{CONTINUED}")
    assert written[-2].endswith(
        f"[inferactors] {slow.unwritten} line(s) not written here: the disk fell behind"
    )
    assert written[-1].endswith(" stderr 7 after")


async def test_a_real_server_flooding_7_mb_of_200_kib_lines_at_start_stays_bounded(
    tmp_path: Path,
) -> None:
    """The fake llama-server writes 7 MB in 200 KiB lines before it listens: it listens
    (its writes never waited on a full pipe for long enough to stop it), the ring holds its
    budget in continued pieces, and every byte is counted in the evidence."""
    stats = tmp_path / "flood.json"
    faults = FakeServerFaults(flood_start_bytes=7_000_000, flood_line_bytes=200 * KiB)
    argv = fake_server_argv(
        free_port(), faults=faults, sys_path=importable_paths(), flood_stats=stats
    )
    launch = Launch(Path(argv[0]), tuple(argv[1:]), tmp_path, PATH_ENV)
    ring = LogRing(1000, max_bytes=1 * MiB)
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch, log=ring)
        with trio.fail_after(30):
            while not any("listening on" in line.text for line in ring.tail(5)):  # noqa: ASYNC110
                await trio.sleep(0.05)
        evidence = await process.terminate(2.0)
    written = json.loads(stats.read_text())
    assert written["written_bytes"] >= 7_000_000 - 200 * KiB
    assert evidence.stderr_bytes >= written["written_bytes"]
    assert ring.memory_bytes <= 1 * MiB
    kept = ring.tail(1000)
    pieces = [line for line in kept if line.text.startswith(("flood", "x"))]
    assert any(line.continued for line in pieces)
    assert all(len(line.text) <= LINE_LIMIT_BYTES for line in kept)
