"""A starting server's output read line by line (issue 9 item 3): a fault it hangs on is
seen from its own line, chunks split anywhere, and a Running server is no longer read."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from edges.process_support import python_launch
from inferactors._edges.output_lines import LINE_LIMIT_BYTES, QUIET_S, LineWatch, read_stream
from inferactors._edges.process import ManagedProcess
from inferactors._policy.output_pace import LinePace
from inferactors._stop_reasons import FaultKind

BIND = b"OSError: [Errno 98] Address already in use\n"


def test_a_fatal_line_split_across_chunks_is_found() -> None:
    watch = LineWatch()
    for piece in (b"Starting httpd\nOSError: [Errno", b" 98] Address already ", b"in use\n"):
        watch.stderr.feed(piece)
    assert watch.fatal is not None
    assert (watch.fatal.kind, watch.fatal.line) == (
        FaultKind.ADDRESS_IN_USE,
        "OSError: [Errno 98] Address already in use",
    )
    assert not watch.active  # found: no more reading


def test_only_live_fatal_kinds_wake_the_watch() -> None:
    watch = LineWatch()
    watch.stderr.feed(b"gguf_init_from_reader: failed to read magic\n")  # it exits by itself
    watch.stdout.feed(b"error: invalid argument: --x\n")
    assert watch.fatal is None
    watch.stderr.feed(b"srv start: couldn't bind HTTP server socket, port: 1\n")
    assert watch.fatal is not None
    assert watch.fatal.kind is FaultKind.CANNOT_BIND


def test_the_last_line_is_read_at_end_of_file_without_a_newline() -> None:
    watch = LineWatch()
    watch.stderr.feed(BIND.rstrip(b"\n"))
    assert watch.fatal is None
    watch.stderr.feed(b"")
    assert watch.fatal is not None


def test_a_stopped_watch_reads_nothing_more() -> None:
    watch = LineWatch()
    watch.stop()
    watch.stderr.feed(BIND)
    watch.stderr.feed(b"")
    assert watch.fatal is None


def test_an_endless_line_is_read_in_pieces_not_kept_whole() -> None:
    watch = LineWatch()
    watch.stderr.feed(b"x" * (LINE_LIMIT_BYTES + 1))
    watch.stderr.feed(b"y" * 10)
    assert len(watch.stderr._partial) == 11  # one full piece was read; the rest waits
    watch.stderr.feed(b"\n" + BIND)
    assert watch.fatal is not None


async def test_wait_fatal_wakes_when_the_line_arrives() -> None:
    watch = LineWatch()
    async with trio.open_nursery() as nursery:
        woke: list[str] = []

        async def waiter() -> None:
            woke.append((await watch.wait_fatal()).line)

        nursery.start_soon(waiter)
        await trio.sleep(0.01)
        assert woke == []
        watch.stderr.feed(BIND)
    assert woke == ["OSError: [Errno 98] Address already in use"]


@pytest.mark.usefixtures("no_leaked_processes")
async def test_a_real_process_that_prints_a_bind_error_and_hangs_is_seen_at_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = (
        "import sys, time; print('loading', flush=True); "
        "sys.stderr.write('OSError: [Errno 98] Address already in use\\n'); "
        "sys.stderr.flush(); time.sleep(60)"
    )
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    with trio.fail_after(10):
        found = await process.lines.wait_fatal()
    seen_s = trio.current_time() - process.started_at
    assert found.kind is FaultKind.ADDRESS_IN_USE
    assert process.running  # it hangs: stopping it is the actor's job
    evidence = await process.terminate(1.0)
    assert evidence.signal is not None
    print(f"{sys.executable}: bind error seen {seen_s:.3f} s after spawn")


@attrs.define
class Said:
    """A `LineSink` that keeps what it is told, in order."""

    said: list[str] = attrs.Factory(list)

    def record(self, stream: str, pid: int, text: str, continued: bool = False) -> None:
        self.said.append(text)

    def probe(self) -> None:
        pass

    def dropped(self, stream: str, pid: int, lines: int, size: int) -> None:
        self.said.append(f"<{lines} dropped, {size} bytes>")


async def test_the_last_line_after_a_flood_is_read_once_the_server_goes_quiet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Said()
    watch = LineWatch(sink=sink, pace=LinePace(rate_per_s=0.0, burst=2), clock=trio.current_time)
    send, receive = trio.testing.memory_stream_one_way_pair()
    flood = b"".join(b"flood %d\n" % n for n in range(1000))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_stream, receive, watch.stderr)
        await send.send_all(flood + b"LAST: the real error\n")  # then silence: it lives on
        await trio.sleep(QUIET_S / 2)
        assert sink.said == ["flood 0", "flood 1"]  # a flood still under way says nothing
        await trio.sleep(QUIET_S)
        dropped = len(flood) - len(b"flood 0\nflood 1\n")
        assert sink.said == [
            "flood 0",
            "flood 1",
            f"<998 dropped, {dropped} bytes>",
            "LAST: the real error",
        ]
        nursery.cancel_scope.cancel()
    assert watch.stderr.capture.tail_text.endswith("flood 999\nLAST: the real error\n")
