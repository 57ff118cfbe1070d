"""The supervisor handles what is queued for it in batches: every event the actors queued,
and every command waiting in its inbox, in one pass through the scheduler each, so a loop
that lags (a thousand adopted servers admitted at once on a shared CPU) does not make it a
bottleneck of one message per loop iteration. The passes are counted as a task's
checkpoints (each one lets every runnable task run once); MockClock."""

from __future__ import annotations

import contextlib
from functools import partial

import trio
import trio.testing

from inferactors import Event, StateChanged
from inferactors._actors.messages import ListInstances, Subscribe, call
from inferactors._actors.supervisor import Supervisor
from inferactors._status import InstanceState

QUEUED = 40


async def passes_until(done: trio.Event, most: int) -> int:
    """How many checkpoints this task made before ``done`` (at most ``most``)."""
    for count in range(most):
        if done.is_set():
            return count
        await trio.lowlevel.checkpoint()
    return most


async def test_events_queued_together_reach_a_subscriber_in_a_few_passes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor.create()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.serve)
        events = await call(supervisor.inbox, partial(Subscribe, 2 * QUEUED))
        got: list[StateChanged] = []
        done = trio.Event()

        async def read() -> None:  # takes what arrived at each pass, as a reader may
            async for event in events:
                batch = [event]
                with contextlib.suppress(trio.WouldBlock):
                    while True:
                        batch.append(events.receive_nowait())
                got.extend(item for item in batch if isinstance(item, StateChanged))
                if len(got) == QUEUED:
                    done.set()

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        for number in range(QUEUED):
            supervisor.events.send_nowait(
                StateChanged(f"s{number}", InstanceState.LOADED, InstanceState.RUNNING, "", 0.0)
            )
        passes = await passes_until(done, 4 * QUEUED)
        assert [event.instance_id for event in got] == [f"s{n}" for n in range(QUEUED)]
        assert passes < QUEUED / 4  # one event per pass (or two) took over QUEUED
        nursery.cancel_scope.cancel()


async def test_commands_queued_together_are_answered_in_a_few_passes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor.create()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.serve)
        answered: list[tuple[str, ...]] = []
        done = trio.Event()

        async def ask() -> None:
            answered.append(await call(supervisor.inbox, ListInstances))
            if len(answered) == QUEUED:
                done.set()

        for _ in range(QUEUED):
            nursery.start_soon(ask)
        passes = await passes_until(done, 4 * QUEUED)
        assert answered == [()] * QUEUED
        assert passes < QUEUED / 4
        nursery.cancel_scope.cancel()


async def test_no_event_an_actor_emits_is_dropped_however_far_behind_the_supervisor_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its decisions come from the events (an exit is a restart): thousands queued before
    the supervisor serves all reach it, in order, none refused at the channel."""
    supervisor = Supervisor.create()
    queued = 5_000
    for number in range(queued):  # the supervisor is not serving: nothing drains them
        supervisor.events.send_nowait(
            StateChanged(f"s{number}", InstanceState.LOADED, InstanceState.RUNNING, "", 0.0)
        )
    async with trio.open_nursery() as nursery:
        streams: list[trio.MemoryReceiveChannel[Event]] = []

        async def subscribe() -> None:
            streams.append(await call(supervisor.inbox, partial(Subscribe, queued + 10)))

        nursery.start_soon(subscribe)
        await trio.testing.wait_all_tasks_blocked()  # queued in the inbox: answered first
        await nursery.start(supervisor.serve)
        await trio.testing.wait_all_tasks_blocked()
        [events] = streams
        got: list[str] = []
        with trio.fail_after(60):
            async for event in events:
                if isinstance(event, StateChanged):
                    got.append(event.instance_id)
                if len(got) == queued:
                    break
        assert got == [f"s{n}" for n in range(queued)]
        nursery.cancel_scope.cancel()
