"""`ListenerWatch`: the LISTEN table read in a thread of its own once per tick for every
waiter, and a waiter woken only when the listeners beyond loopback change.

The reading thread runs on the real clock, so these tests do too, with a 20 ms period and
bounds loose enough for a loaded 2-core machine (what they check is who is woken and
when relative to the change, not how fast the machine is)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs
import pytest
import trio

from inferactors._edges import listen_watch
from inferactors._edges.listen_watch import JITTER, THREAD_NAME, ListenerWatch
from inferactors._edges.socket_table import SocketEntry, SocketTable

PERIOD_S = 0.02
LOOPBACK = SocketEntry("127.0.0.1", 8080, 11)
HOST_SSH = SocketEntry("0.0.0.0", 22, 12)


@attrs.define
class Table:
    """What the kernel shows; every read counted (monotonic time), in whichever thread."""

    entries: list[SocketEntry] = attrs.Factory(lambda: [LOOPBACK, HOST_SSH])
    reads: list[float] = attrs.Factory(list)

    def __call__(self, port: int | None) -> list[SocketEntry]:
        self.reads.append(time.monotonic())
        return [e for e in list(self.entries) if port is None or e.port == port]


@attrs.define(eq=False)
class Steps(trio.abc.Instrument):
    """How many times each waiter task ran."""

    count: dict[trio.lowlevel.Task, int] = attrs.Factory(dict)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("waiter"):
            self.count[task] = self.count.get(task, 0) + 1


def watch_over(table: Table, linger_s: float = 0.2, tick_s: float = 0.05) -> ListenerWatch:
    return ListenerWatch(SocketTable(read=table, tick_s=tick_s), PERIOD_S, linger_s)


def readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


async def settled(watch: ListenerWatch) -> int:
    """The generation after the first read (which counts as a change)."""
    return await watch.changed(await watch.changed(0, trio.current_time() + 1), 10**9)


async def until(condition: Callable[[], bool], within_s: float) -> None:
    with trio.fail_after(within_s):
        while not condition():  # noqa: ASYNC110  (a thread's state: nothing to wait on)
            await trio.sleep(0.01)


def start_waiters(
    nursery: trio.Nursery, watch: ListenerWatch, seen: int, count: int, within_s: float
) -> list[tuple[int, float]]:
    """``count`` tasks named ``waiter`` waiting on ``watch`` from ``seen`` for ``within_s``;
    each appends what it returned and when (trio time) to the list given back."""
    returned: list[tuple[int, float]] = []

    async def waiter() -> None:
        generation = await watch.changed(seen, trio.current_time() + within_s)
        returned.append((generation, trio.current_time()))

    for _ in range(count):
        nursery.start_soon(waiter)
    return returned


async def test_a_quiet_table_is_read_once_a_tick_in_one_thread_and_wakes_nobody() -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    began, reads_before = trio.current_time(), len(table.reads)
    async with trio.open_nursery() as nursery:
        returned = start_waiters(nursery, watch, seen, 20, 1.0)
        await trio.sleep(0.5)
        assert len(readers()) == 1  # one thread reads for all 20
    trio.lowlevel.remove_instrument(steps)
    reads = len(table.reads) - reads_before
    assert [generation for generation, _ in returned] == [seen] * 20
    assert all(at >= began + 1.0 for _, at in returned)  # none woken before its deadline
    assert max(steps.count.values()) <= 3  # started, and woken by the deadline
    assert 5 <= reads <= 1.0 / (JITTER * PERIOD_S) + 2  # one read a gap, not one per waiter


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.entries.append(SocketEntry("0.0.0.0", 9000, 13)), id="new-any"),
        pytest.param(lambda t: t.entries.append(SocketEntry("::", 9000, 14)), id="new-v6-any"),
        pytest.param(lambda t: t.entries.append(SocketEntry("10.1.2.3", 9, 15)), id="new-lan"),
        pytest.param(lambda t: t.entries.remove(HOST_SSH), id="gone"),
        pytest.param(
            lambda t: t.entries.__setitem__(1, attrs.evolve(HOST_SSH, inode=99)), id="same-port-new"
        ),
    ],
)
async def test_a_change_beyond_loopback_wakes_every_waiter(change: object) -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    async with trio.open_nursery() as nursery:
        returned = start_waiters(nursery, watch, seen, 5, 30.0)
        await trio.sleep(0.1)
        changed_at = trio.current_time()
        change(table)  # type: ignore[operator]
    assert len(returned) == 5
    assert {generation for generation, _ in returned} == {seen + 1}
    assert all(0 < at - changed_at < 5.0 for _, at in returned)  # woken by it, not at 30 s


async def test_listeners_coming_and_going_on_loopback_wake_nobody() -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    async with trio.open_nursery() as nursery:

        async def churn() -> None:
            for port in range(9000, 9020):
                table.entries.append(SocketEntry("127.0.0.1", port, port))
                table.entries.append(SocketEntry("::1", port, port + 100))
                await trio.sleep(0.013)

        nursery.start_soon(churn)
        deadline = trio.current_time() + 0.6
        assert await watch.changed(seen, deadline) == seen
        assert trio.current_time() >= deadline


async def test_the_thread_ends_once_nobody_waits_and_the_next_waiter_sees_what_changed() -> None:
    table = Table()
    watch = watch_over(table, linger_s=0.1)
    seen = await settled(watch)
    await until(lambda: not readers(), 5.0)
    reads = len(table.reads)
    await trio.sleep(0.2)
    assert len(table.reads) == reads  # nobody waits: nothing is read
    table.entries.append(SocketEntry("0.0.0.0", 9000, 13))  # while no thread reads
    assert await watch.changed(seen, trio.current_time() + 10) == seen + 1


async def test_a_waiter_cancelled_leaves_the_others_woken_by_a_change() -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    results: list[int] = []
    first = trio.CancelScope()

    async def cancelled() -> None:
        with first:
            await watch.changed(seen, trio.current_time() + 60.0)

    async def follower() -> None:
        results.append(await watch.changed(seen, trio.current_time() + 60.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled)
        nursery.start_soon(follower)
        await trio.sleep(0.1)
        first.cancel()
        reads_after_cancel = len(table.reads)
        await trio.sleep(0.2)
        assert len(table.reads) > reads_after_cancel  # the follower still has it read
        table.entries.append(SocketEntry("0.0.0.0", 9000, 13))
    assert results == [seen + 1]


async def test_a_change_drops_the_tables_cached_dumps_for_the_scans_it_wakes() -> None:
    table = Table()
    watch = watch_over(table, tick_s=60.0)  # a dump would answer for a minute
    seen = await settled(watch)
    assert SocketEntry("0.0.0.0", 9000, 13) not in await watch.table.listeners(None)
    table.entries.append(SocketEntry("0.0.0.0", 9000, 13))
    assert await watch.changed(seen, trio.current_time() + 10) == seen + 1
    assert SocketEntry("0.0.0.0", 9000, 13) in await watch.table.listeners(None)


async def test_a_reader_that_fails_gives_way_to_psutil_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown = [LOOPBACK, HOST_SSH]
    psutil_reads: list[int | None] = []

    def failing(port: int | None) -> list[SocketEntry]:
        raise OSError(1, "Operation not permitted")

    def psutil_listeners(port: int | None) -> list[SocketEntry]:
        psutil_reads.append(port)
        return list(shown)

    monkeypatch.setattr(listen_watch, "psutil_listeners", psutil_listeners)
    watch = ListenerWatch(SocketTable(read=failing), PERIOD_S, 0.2)
    seen = await settled(watch)
    shown.append(SocketEntry("0.0.0.0", 9000, 0, 4321))  # psutil: a pid, no inode
    assert await watch.changed(seen, trio.current_time() + 10) == seen + 1
    assert len(psutil_reads) >= 2


def test_a_watch_serves_a_later_trio_run_while_its_thread_lingers() -> None:
    table = Table()
    watch = watch_over(table, linger_s=30.0)
    seen = trio.run(settled, watch)
    assert len(readers()) >= 1  # still reading for the run that ended

    async def later() -> int:
        async with trio.open_nursery() as nursery:
            returned = start_waiters(nursery, watch, seen, 1, 10.0)
            await trio.sleep(0.1)
            table.entries.append(SocketEntry("0.0.0.0", 9000, 13))
        return returned[0][0]

    assert trio.run(later) == seen + 1


async def test_a_thread_that_fails_is_logged_and_the_next_waiter_starts_another(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = Table()
    failures = [RuntimeError("the table is unreadable")]

    def fails_once(port: int | None) -> list[SocketEntry]:
        if failures:
            raise failures.pop()
        return table(port)

    def no_psutil(port: int | None) -> list[SocketEntry]:
        raise RuntimeError("and so is psutil's")

    monkeypatch.setattr(listen_watch, "psutil_listeners", no_psutil)
    watch = ListenerWatch(SocketTable(read=fails_once), PERIOD_S, 0.2)
    first = await watch.changed(0, trio.current_time() + 1)
    assert await watch.changed(first, trio.current_time() + 0.3) == first  # its thread died
    assert "listener watch: its thread failed" in caplog.text
    monkeypatch.setattr(listen_watch, "psutil_listeners", table)
    assert await watch.changed(first, trio.current_time() + 10) == first + 1  # a new one read


async def test_no_thread_to_be_had_leaves_the_waiter_to_its_deadline_not_hung(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = Table()
    watch = watch_over(table)

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refused)
        first = await watch.changed(0, trio.current_time() + 1)
        deadline = trio.current_time() + 0.3
        assert await watch.changed(first, deadline) == first
        assert trio.current_time() >= deadline
    assert "cannot start its thread" in caplog.text
    assert await watch.changed(first, trio.current_time() + 10) == first + 1  # threads again


async def test_the_gaps_between_reads_are_drawn_not_a_fixed_grid() -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    await watch.changed(seen, trio.current_time() + 1.0)
    gaps = [b - a for a, b in zip(table.reads, table.reads[1:], strict=False)]
    assert len(gaps) >= 20
    assert max(gaps) - min(gaps) > 0.1 * PERIOD_S  # a window in step with a grid is caught
    assert sum(gaps) / len(gaps) < PERIOD_S  # and they average under the longest gap
