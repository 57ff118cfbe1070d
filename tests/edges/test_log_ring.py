"""A managed server's output as timestamped lines (issue 10 item 4): a bounded ring, a
follower that falls behind loses lines with a marker and never holds the reader up, a
rotating file, and the lines a server writes about our probes kept out of the ring and the
evidence (counted instead), read from a real process."""

from __future__ import annotations

import itertools
from pathlib import Path

import attrs
import trio

from edges.process_support import python_launch
from inferactors._config.config import ManagedConfig
from inferactors._config.server_logs import ServerLogs
from inferactors._edges.log_ring import LogBook, LogLine, LogRing
from inferactors._edges.process import ManagedProcess

PROBE = '127.0.0.1 - - [05/Mar/2025 10:00:01] "GET /health HTTP/1.1" 200 -'


def clock() -> itertools.count[float]:
    return itertools.count(1_700_000_000.0)


def test_the_ring_keeps_only_its_last_lines_with_their_time_stream_and_pid() -> None:
    ticks = clock()
    ring = LogRing(3, lambda: next(ticks))
    for n in range(5):
        ring.record("stderr" if n % 2 else "stdout", 40 + n, f"line {n}")
    assert ring.tail(10) == (
        LogLine(1_700_000_002.0, "stdout", 42, "line 2"),
        LogLine(1_700_000_003.0, "stderr", 43, "line 3"),
        LogLine(1_700_000_004.0, "stdout", 44, "line 4"),
    )
    assert [line.text for line in ring.tail(1)] == ["line 4"]
    assert ring.tail(0) == ()


async def test_a_slow_follower_loses_lines_with_a_marker_and_never_blocks_the_writer() -> None:
    ring = LogRing(100)
    with ring.follow(buffer=2) as slow, ring.follow(buffer=50) as fast:
        for n in range(6):  # `record` is synchronous: it cannot wait, whoever reads
            ring.record("stdout", 7, f"line {n}")
        assert [slow.receive_nowait().text for _ in range(2)] == ["line 0", "line 1"]
        ring.record("stdout", 7, "line 6")
        marker, after = slow.receive_nowait(), slow.receive_nowait()
        assert marker.text == "[inferactors] 4 line(s) dropped here: this reader fell behind"
        assert after.text == "line 6"
        assert [fast.receive_nowait().text for _ in range(7)] == [f"line {n}" for n in range(7)]
    ring.record("stdout", 7, "after the followers left")  # a gone follower is forgotten
    assert len(ring.tail(100)) == 8


def test_the_rotating_file_rotates_and_keeps_file_count_backups(tmp_path: Path) -> None:
    book = LogBook()
    logs = ServerLogs(lines=10, file_bytes=2000, file_count=2)
    managed = ManagedConfig(registry=tmp_path / "r.json", data_root=tmp_path, logs=logs)
    ring = book.ring("chat-1", managed)
    for n in range(200):
        ring.record("stdout", 9, f"line {n:04d} " + "x" * 40)
    book.close()
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == ["chat-1.log", "chat-1.log.1", "chat-1.log.2"]
    last = (tmp_path / "logs" / "chat-1.log").read_text().splitlines()[-1]
    assert last.endswith(" stdout 9 line 0199 " + "x" * 40)
    assert last[:4].isdigit()
    assert last[10] == "T"  # ISO 8601 with the date
    assert all(p.stat().st_size <= 2000 for p in (tmp_path / "logs").iterdir())


def test_no_file_when_file_bytes_is_zero(tmp_path: Path) -> None:
    book = LogBook()
    logs = ServerLogs(file_bytes=0)
    managed = ManagedConfig(registry=tmp_path / "r.json", data_root=tmp_path, logs=logs)
    book.ring("chat-1", managed).record("stdout", 9, "kept in memory only")
    book.close()
    assert not (tmp_path / "logs").exists()


def test_by_default_the_output_is_on_disk_private_and_a_new_book_reads_it_back(
    tmp_path: Path,
) -> None:
    managed = ManagedConfig(registry=tmp_path / "r.json", data_root=tmp_path)
    assert managed.logs.file_bytes == 10 << 20
    first = LogBook()
    ring = first.ring("chat-1", managed)
    for n in range(5):
        ring.record("stderr" if n % 2 else "stdout", 40, f"line {n}")
    ring.record("stdout", 40, "a long line's first piece", continued=True)
    first.close()
    path = tmp_path / "logs" / "chat-1.log"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    second = LogBook()  # a supervisor started again
    again = second.ring("chat-1", attrs.evolve(managed, logs=ServerLogs(lines=4)))
    back = again.tail(10)
    assert [(line.stream, line.pid, line.text) for line in back] == [
        ("stdout", 40, "line 2"),
        ("stderr", 40, "line 3"),
        ("stdout", 40, "line 4"),
        ("stdout", 40, "a long line's first piece"),
    ]
    assert [line.continued for line in back] == [False, False, False, True]
    kept = ring.tail(10)[2].at
    assert 0.0 <= kept - back[0].at < 0.0011  # the file keeps milliseconds (cut, not rounded)
    assert round(back[0].at * 1000) == int(kept * 1000)
    again.record("stdout", 41, "the next server")
    second.close()
    lines = path.read_text().splitlines()  # read back, not written twice
    assert len(lines) == 7
    assert lines[-1].endswith(" stdout 41 the next server")


def test_reading_back_skips_lines_not_in_the_files_shape(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "chat-1.log").write_text(
        "half a line cut by the read limit\n"
        "2026-12-04T22:00:00.000+00:00 stdout 7 kept\n"
        "not-a-time stdout 7 skipped\n"
        "2026-12-04T22:00:01.000+00:00 stdin 7 skipped\n"
        "2026-12-04T22:00:02.000+00:00 stderr 8 \n"
    )
    ring = LogBook().ring("chat-1", ManagedConfig(tmp_path / "r.json", tmp_path))
    assert [(line.stream, line.pid, line.text) for line in ring.tail(10)] == [
        ("stdout", 7, "kept"),
        ("stderr", 8, ""),
    ]
    assert ring.tail(1)[0].at == 1_796_421_602.0


PRINTER = (
    "import sys\n"
    "for n in range(50):\n"
    f"    print({PROBE!r}, file=sys.stderr)\n"
    "    if n % 10 == 0: print(f'served request {n}', flush=True)\n"
    "print('the last words, unended', file=sys.stderr, end='')\n"
)


async def test_probe_lines_of_a_real_process_are_counted_not_kept(tmp_path: Path) -> None:
    ring = LogRing(1000)
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, PRINTER), log=ring)
        with trio.fail_after(10):
            evidence = await process.wait_exited()
    kept = ring.tail(1000)
    stdout = [line.text for line in kept if line.stream == "stdout"]
    assert stdout == [f"served request {n}" for n in range(0, 50, 10)]
    assert [line.text for line in kept if line.stream == "stderr"] == ["the last words, unended"]
    assert {line.pid for line in ring.tail(1000)} == {process.pid}
    assert ring.probe_lines == 50
    assert PROBE.encode() not in evidence.stderr
    assert evidence.stderr == b"the last words, unended"
    assert evidence.stderr_tail == "the last words, unended"
    assert evidence.stderr_bytes == 50 * (len(PROBE) + 1) + len("the last words, unended")
    assert not evidence.truncated
