"""`ListenerWatch`: one read of the LISTEN table per tick for every waiter, and a waiter
woken only when the listeners beyond loopback change (under MockClock, a fake reader)."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from inferactors._edges.listen_watch import PERIOD_S, ListenerWatch
from inferactors._edges.socket_table import SocketEntry, SocketTable

LOOPBACK = SocketEntry("127.0.0.1", 8080, 11)
HOST_SSH = SocketEntry("0.0.0.0", 22, 12)


@attrs.define
class Table:
    """What the kernel shows; every read counted with its trio time."""

    entries: list[SocketEntry] = attrs.Factory(lambda: [LOOPBACK, HOST_SSH])
    reads: list[float] = attrs.Factory(list)

    def __call__(self, port: int | None) -> list[SocketEntry]:
        self.reads.append(trio.current_time())
        return [e for e in self.entries if port is None or e.port == port]


@attrs.define(eq=False)
class Steps(trio.abc.Instrument):
    """How many times each waiter task ran."""

    count: dict[trio.lowlevel.Task, int] = attrs.Factory(dict)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("waiter"):
            self.count[task] = self.count.get(task, 0) + 1


def watch_over(table: Table) -> ListenerWatch:
    return ListenerWatch(SocketTable(read=table))


async def settled(watch: ListenerWatch) -> int:
    """The generation after the first read (which counts as a change)."""
    return await watch.changed(await watch.changed(0, trio.current_time() + 1), 10**9)


def start_waiters(
    nursery: trio.Nursery, watch: ListenerWatch, seen: int, count: int, within_s: float
) -> list[tuple[int, float]]:
    """``count`` tasks named ``waiter`` waiting on ``watch`` from ``seen`` for ``within_s``;
    each appends what it returned and when to the list given back."""
    returned: list[tuple[int, float]] = []

    async def waiter() -> None:
        generation = await watch.changed(seen, trio.current_time() + within_s)
        returned.append((generation, trio.current_time()))

    for _ in range(count):
        nursery.start_soon(waiter)
    return returned


async def test_a_quiet_table_is_read_once_a_tick_and_wakes_nobody_until_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    began, reads_before = trio.current_time(), len(table.reads)
    async with trio.open_nursery() as nursery:
        returned = start_waiters(nursery, watch, seen, 20, 5.0)
    trio.lowlevel.remove_instrument(steps)
    reads = len(table.reads) - reads_before
    steps_of_waiters = sorted(steps.count.values())
    assert steps_of_waiters[-1] >= 5.0 / PERIOD_S  # one of them read the table
    assert steps_of_waiters[:-1] == [steps_of_waiters[0]] * 19  # the others slept throughout
    assert steps_of_waiters[0] <= 4
    assert [generation for generation, _ in returned] == [seen] * 20
    assert all(at == pytest.approx(began + 5.0) for _, at in returned)
    assert 5.0 / PERIOD_S - 1 <= reads <= 5.0 / PERIOD_S + 1  # one read a tick for all 20


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
async def test_a_change_beyond_loopback_wakes_every_waiter_within_a_tick(
    autojump_clock: trio.testing.MockClock, change: object
) -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    async with trio.open_nursery() as nursery:
        returned = start_waiters(nursery, watch, seen, 5, 60.0)
        await trio.sleep(1.03)
        changed_at = trio.current_time()
        change(table)  # type: ignore[operator]
    assert len(returned) == 5
    assert {generation for generation, _ in returned} == {seen + 1}
    assert all(0 < at - changed_at <= PERIOD_S + 1e-9 for _, at in returned)


async def test_listeners_coming_and_going_on_loopback_wake_nobody(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    async with trio.open_nursery() as nursery:

        async def churn() -> None:
            for port in range(9000, 9020):
                table.entries.append(SocketEntry("127.0.0.1", port, port))
                table.entries.append(SocketEntry("::1", port, port + 100))
                await trio.sleep(0.13)

        nursery.start_soon(churn)
        deadline = trio.current_time() + 4.0
        assert await watch.changed(seen, deadline) == seen
        assert trio.current_time() == pytest.approx(deadline)


async def test_a_reader_cancelled_hands_the_reading_to_another_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = Table()
    watch = watch_over(table)
    seen = await settled(watch)
    results: list[int] = []
    first = trio.CancelScope()

    async def reader() -> None:
        with first:
            await watch.changed(seen, trio.current_time() + 60.0)

    async def follower() -> None:
        results.append(await watch.changed(seen, trio.current_time() + 60.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(0.01)  # the first waiter is reading
        nursery.start_soon(follower)
        await trio.sleep(1.0)
        first.cancel()
        reads_after_cancel = len(table.reads)
        await trio.sleep(1.0)
        assert len(table.reads) - reads_after_cancel >= 1.0 / PERIOD_S - 1  # still read
        table.entries.append(SocketEntry("0.0.0.0", 9000, 13))
    assert results == [seen + 1]
