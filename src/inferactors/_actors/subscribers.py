"""The supervisor's event subscribers: each stream, and what it lost.

The supervisor never waits for a subscriber: an event that finds a subscriber's buffer
full is dropped for that subscriber alone and counted. Before the next event that finds
room, the subscriber gets an `EventsLost` marker with the count, so a reader always knows
that its view has a gap (and, for a status, to read the board again). A subscriber whose
receiving end is closed is forgotten.
"""

from __future__ import annotations

import attrs
import trio

from .._events import Event, EventsLost


@attrs.define(eq=False)
class Subscriber:
    """One event stream's sending end and the events dropped for it since its last marker."""

    send: trio.MemorySendChannel[Event]
    lost: int = 0

    def offer(self, event: Event) -> bool:
        """Send ``event`` now, after a marker if events were lost; False when the buffer
        is full (``event`` is then counted as lost).

        Raises:
            trio.ClosedResourceError, trio.BrokenResourceError: the stream is gone.
        """
        try:
            if self.lost:
                self.send.send_nowait(EventsLost(self.lost, trio.current_time()))
                self.lost = 0
            self.send.send_nowait(event)
        except trio.WouldBlock:
            self.lost += 1
            return False
        return True


@attrs.define(eq=False)
class Subscribers:
    """Every open event stream of one supervisor."""

    _all: list[Subscriber] = attrs.Factory(list)
    dropped: int = 0
    """Events dropped for any subscriber, in all."""

    def open(self, buffer: int) -> trio.MemoryReceiveChannel[Event]:
        """A new stream that holds up to ``buffer`` events (its `EventsLost` markers too)."""
        send, receive = trio.open_memory_channel[Event](buffer)
        self._all.append(Subscriber(send))
        return receive

    def publish(self, event: Event) -> None:
        """Offer ``event`` to every subscriber, never waiting."""
        for subscriber in list(self._all):
            try:
                if not subscriber.offer(event):
                    self.dropped += 1
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self._all.remove(subscriber)

    def close(self) -> None:
        """End every stream (the supervisor stopped)."""
        for subscriber in self._all:
            subscriber.send.close()
