"""How many request bodies the front door holds at once, and where it parses them: nothing a
client sends may stall the event loop that supervises every server.

The loop that answers the front door also probes every server and answers the control API.
So:

- `Intake.admit`: at most `IntakeLimits.bodies` request bodies are being read or parsed at
  once, and together they hold at most `IntakeLimits.held_bytes` bytes; a request over
  either bound is answered 503 at once, before its body is read, with the bound in words
  (a client that opens thousands of slow uploads, or sends many large bodies, takes these
  slots and no more: the rest of the front door, and the supervisor, keep answering);
- `Intake.parse`: a body of at most `IntakeLimits.inline_bytes` is parsed on the loop
  (microseconds); a larger one in a worker thread (`trio.to_thread.run_sync`), one at a
  time (`IntakeLimits.parsers`), so a 20 MB body of a million small objects costs its own
  request seconds, never the loop's, and its peak memory is paid once, not per body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import trio

from .._errors import BadRequest
from .front_door_body import json_object

MiB = 1024 * 1024
_T = TypeVar("_T")


@attrs.frozen
class IntakeLimits:
    """Bounds on the bodies the front door reads and parses at once.

    Attributes:
        bodies: request bodies read or parsed at once (more: 503 at once).
        held_bytes: bytes those bodies may hold together (more: 503).
        inline_bytes: the largest body parsed on the event loop; larger ones are parsed
            in a worker thread.
        parsers: worker threads parsing large bodies at once (the others wait their turn,
            their slot held).
    """

    bodies: int = 64
    held_bytes: int = 256 * MiB
    inline_bytes: int = 256 * 1024
    parsers: int = 1


class Intake:
    """The front door's bound on bodies at once, and its parser (module docstring)."""

    def __init__(self, limits: IntakeLimits = IntakeLimits()) -> None:
        self.limits = limits
        self.reading = 0
        self.held = 0
        self._parsers = trio.CapacityLimiter(limits.parsers)

    @contextmanager
    def admit(self) -> Iterator[Holding]:
        """One body's slot for the ``with`` block; its bytes are counted as they come
        (`Holding.take`) and given back when the block ends.

        Raises:
            BadRequest: 503 when `IntakeLimits.bodies` bodies are being read already.
        """
        if self.reading >= self.limits.bodies:
            raise BadRequest(
                f"the front door is reading {self.reading} request bodies already, its "
                f"bound ({self.limits.bodies} at once): try again when one is done",
                status=503,
            )
        holding = Holding(self)
        self.reading += 1
        try:
            yield holding
        finally:
            self.reading -= 1
            self.held -= holding.size

    async def parse(
        self, body: bytes, check: Callable[[dict[str, Any]], _T]
    ) -> tuple[dict[str, Any], _T]:
        """``body`` as a JSON object (`front_door_body.json_object`) and what ``check``
        makes of it (the model it names), parsed off the event loop when it is large
        (module docstring). A refused large body is dropped in the worker thread too
        (freeing a million objects is not free). Cancellation while a thread parses leaves
        the thread to finish (its result dropped).

        Raises:
            BadRequest: as `json_object`.
            Exception: what ``check`` raises.
        """
        if len(body) <= self.limits.inline_bytes:
            document = json_object(body)
            return document, check(document)
        return await trio.to_thread.run_sync(_in_steps, body, check, limiter=self._parsers)


def _in_steps(body: bytes, check: Callable[[dict[str, Any]], _T]) -> tuple[dict[str, Any], _T]:
    document = json_object(body, in_steps=True)
    try:
        return document, check(document)
    except Exception as error:
        del document  # freed here, not on the event loop: nothing else refers to it
        raise error.with_traceback(None) from None


class Holding:
    """One admitted body's share of `IntakeLimits.held_bytes`."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.size = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes of this body.

        Raises:
            BadRequest: 503 when the bodies read at once would hold more than
                `IntakeLimits.held_bytes` together.
        """
        intake = self.intake
        if intake.held + size > intake.limits.held_bytes:
            raise BadRequest(
                f"the front door holds {intake.held} bytes of request bodies already, its "
                f"bound ({intake.limits.held_bytes} bytes at once): try again when one is done",
                status=503,
            )
        intake.held += size
        self.size += size
