"""The log of ``inferactors run``: `EventPrinter` prints the fleet's events in their order,
one line each, naming each instance by its name (role), and can be asked to catch up
(`EventPrinter.catch_up`) so a line said by another task comes after every event heard
before it (the line that says why the supervisor stops comes after the state changes it
sums up)."""

from __future__ import annotations

from typing import Protocol

import attrs
import trio

from .._events import Event, instance_of
from .logging_setup import log_event


class Names(Protocol):
    """What the printer reads of the fleet: how to name an instance."""

    def name_of(self, instance_id: str) -> str | None:
        """The name (role) of the instance with ``instance_id``, if known."""

    def adopted(self, instance_id: str) -> bool:
        """Whether the instance is an adopted server."""


@attrs.define(eq=False)
class EventPrinter:
    """Prints ``events`` (one follower of the fleet's stream) as they come (`run`)."""

    events: trio.MemoryReceiveChannel[Event]
    names: Names
    _wait: trio.CancelScope = attrs.Factory(trio.CancelScope)
    _caught_up: trio.Event = attrs.Factory(trio.Event)
    _ended: bool = False

    async def run(self) -> None:
        """Print every event until the channel ends; a `catch_up` interrupts the wait for
        the next one. An event already handed to this task as it is interrupted is printed
        first: trio delivers it (the cancellation comes at the next wait)."""
        try:
            while True:
                with self._wait:
                    event = await self.events.receive()
                    self._print(event)
                if self._wait.cancel_called:
                    self._flush()
                    self._caught_up.set()
                    self._caught_up = trio.Event()
                self._wait = trio.CancelScope()  # one per wait; `catch_up` cancels it
        except (trio.EndOfChannel, trio.ClosedResourceError):
            pass
        finally:
            self._ended = True
            self._caught_up.set()

    async def catch_up(self) -> None:
        """Return once every event this follower received so far is printed (at once
        when `run` has ended)."""
        if self._ended:
            return
        caught_up = self._caught_up
        self._wait.cancel()
        await caught_up.wait()

    def _flush(self) -> None:
        """Print the events already queued, in their order."""
        while True:
            try:
                event = self.events.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            self._print(event)

    def _print(self, event: Event) -> None:
        """Log ``event`` naming its instance by its name (role)."""
        iid = instance_of(event)
        if iid is None:
            log_event(event)
            return
        log_event(event, self.names.name_of(iid), self.names.adopted(iid))
