"""The relay of the instance actors' events to the supervisor: every event an actor emits
goes through one unbounded channel (`EVENT_BUFFER`) and reaches the supervisor's own inbox
as `Notify`, so the supervisor handles events and commands in one order, one at a time.
Split from ``supervisor``, which runs `relay_events` in its nursery."""

from __future__ import annotations

import math

import trio

from .._events import Event
from .messages import Notify

EVENT_BUFFER = math.inf
"""The actors' event channel to the supervisor holds every event: the supervisor's own
decisions are made from them (a `ProcessExited` is a restart, a `StateChanged` refills a
budget), so one dropped because the channel was full would leave a server down for good.
Actors never wait to emit (`Mailbox.emit`), and the relay drains every queued event at
each pass (`relay_events`), so what is queued is what our own late loop has not yet
reached. Subscribers' buffers stay bounded: what a slow subscriber misses is counted and
told to it (`subscribers.py`)."""


async def relay_events(
    events: trio.MemoryReceiveChannel[Event], inbox: trio.MemorySendChannel[object]
) -> None:
    """Forward the actors' ``events`` to ``inbox`` as `Notify`, every one already queued at
    each pass (as the supervisor's ``_dispatch_queued`` takes its commands), waiting only
    while the inbox is full; ends when every sender of ``events`` has closed."""
    async for event in events:
        await inbox.send(Notify(event))
        while True:
            try:
                more = events.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            try:
                inbox.send_nowait(Notify(more))
            except trio.WouldBlock:
                await inbox.send(Notify(more))
