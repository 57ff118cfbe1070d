"""The hook a reload calls before it stops an instance that serves requests: `Drainer`.

A reload that changes or removes an instance stops its server; a request in flight through
it (a stream a client is reading) would be cut. The front door (the loopback proxy every
request of a run goes through) knows which requests are in flight: it implements `Drainer`
and is set on the fleet (`Fleet.drainer`). A reload then asks it to drain each changed or
removed instance, all at once, within `DRAIN_S`, and only then stops them. Without a front
door there is nothing to drain (`NoDrain`): requests that reach a server directly are not
ours to see.
"""

from __future__ import annotations

from typing import Protocol

DRAIN_S = 30.0
"""How long a reload waits for an instance's requests in flight before it stops it anyway,
float seconds."""


class Drainer(Protocol):
    """Who can hold new requests away from an instance and wait for those in flight."""

    async def drain(self, name: str, deadline_s: float) -> None:
        """Route no new request to the instance ``name`` (they wait, or go to its
        replacement once it runs) and return once the requests in flight through it are
        over, or ``deadline_s`` float seconds have passed, whichever comes first. Never
        raises for the instance's state; cancellation ends the wait."""
        ...


class NoDrain:
    """The `Drainer` without a front door: nothing in flight is ours to see."""

    async def drain(self, name: str, deadline_s: float) -> None:
        """Return at once."""
