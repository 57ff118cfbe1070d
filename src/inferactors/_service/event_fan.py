"""The fleet's event stream: `EventFan` keeps the last events and passes each new one to
every follower, never waiting for one (a follower that falls behind loses the newest)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

import attrs
import trio

from .._events import Event

EVENT_RING = 1000
"""How many of the last events `EventFan.recent` keeps."""
FOLLOW_BUFFER = 256
"""Events a follower may fall behind before it loses the newest ones."""


@attrs.define(eq=False)
class EventFan:
    """The last `EVENT_RING` events and the followers of new ones."""

    _events: deque[Event] = attrs.Factory(lambda: deque(maxlen=EVENT_RING))
    _followers: set[trio.MemorySendChannel[Event]] = attrs.Factory(set)

    def publish(self, event: Event) -> None:
        """Keep ``event`` and pass it to every follower that has room (never waits)."""
        self._events.append(event)
        for follower in list(self._followers):
            try:
                follower.send_nowait(event)
            except trio.WouldBlock:
                pass  # a slow follower loses events; the runtimes never wait for one
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._followers.discard(follower)

    def recent(self, n: int) -> tuple[Event, ...]:
        """The last ``n`` events (at most `EVENT_RING`), oldest first."""
        return tuple(self._events)[-n:] if n > 0 else ()

    @contextlib.contextmanager
    def follow(self) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        """Every event from now on, until the block is left (or `close`: the channel ends).
        A follower `FOLLOW_BUFFER` events behind loses the newest ones."""
        send, receive = trio.open_memory_channel[Event](FOLLOW_BUFFER)
        self._followers.add(send)
        try:
            with receive:
                yield receive
        finally:
            self._followers.discard(send)
            send.close()

    def close(self) -> None:
        """End every follower's channel after what it holds."""
        for follower in list(self._followers):
            follower.close()
