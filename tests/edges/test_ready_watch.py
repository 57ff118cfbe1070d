"""Readiness lines in a starting server's output (issue 11 item 3): `LineWatch` counts each
line that says the server listens or loaded its model, split across chunks or not, wakes
`wait_ready` at once, and stops counting once the server is Running (`stop`)."""

from __future__ import annotations

import trio
import trio.testing

from inferactors._edges.output_lines import LineWatch

LOADED = b"0.00.015.172 I srv  llama_server: model loaded\n"
LISTENING = b"0.00.015.203 I srv  llama_server: listening on http://127.0.0.1:18777\n"


def test_each_readiness_line_is_counted_wherever_the_chunks_split() -> None:
    watch = LineWatch()
    watch.stderr.feed(b"0.00.004.566 I srv    load_model: loading model 'tiny.gguf'\n")
    assert watch.ready_count == 0
    watch.stderr.feed(LOADED[:20])
    assert watch.ready_count == 0  # not a whole line yet
    watch.stderr.feed(LOADED[20:] + LISTENING)
    assert watch.ready_count == 2
    watch.stdout.feed(b"2026-12-01 19:52:32,344 - INFO - Starting httpd at ::1 on port 1...\n")
    assert watch.ready_count == 3


def test_a_running_server_is_no_longer_read_for_readiness() -> None:
    watch = LineWatch()
    watch.stop()
    watch.stderr.feed(LOADED)
    assert watch.ready_count == 0


async def test_wait_ready_wakes_on_the_next_line_and_returns_at_once_for_one_already_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch = LineWatch()
    woke: list[float] = []

    async def waiter() -> None:
        await watch.wait_ready(0)
        woke.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(1.5)
        assert woke == []
        watch.stderr.feed(LOADED)
    assert woke == [1.5]
    with trio.fail_after(0.001):
        await watch.wait_ready(0)  # a line was read since 0: no wait
    with trio.move_on_after(5.0) as waited:
        await watch.wait_ready(1)
    assert waited.cancelled_caught  # none since: waits for the next one
