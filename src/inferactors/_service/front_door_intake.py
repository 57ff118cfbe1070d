"""How much of request bodies the front door holds at once, and where it parses them:
nothing a client sends may stall the event loop that supervises every server, and no slow
client may shut the door to the others.

The loop that answers the front door also probes every server and answers the control API.
So:

- `Intake.admit`: every body's bytes are counted as they arrive, and the bodies being read
  or parsed together hold at most `IntakeLimits.held_bytes` (the memory bound: a body
  that would pass it is answered 503 with the bound in words). A body holds only what it
  has sent: a client that trickles its body a byte a second holds a few bytes, never a
  slot others need. A body takes one of the `IntakeLimits.bodies` slots only once it is
  large (more than `IntakeLimits.inline_bytes` arrived, the size parsed in a worker
  thread): the slots bound how many large bodies are read and wait for the parser at once
  (one over: 503 in words); small bodies, every ordinary request, never wait for one.
  How long a body may hold anything is bounded by `front_door_body.BodyLimits` (its
  whole time, and the longest silence between two of its chunks: 408);
- `Intake.parse`: a body of at most `IntakeLimits.inline_bytes` is parsed on the loop
  (microseconds); a larger one in a worker thread (`trio.to_thread.run_sync`), one at a
  time (`IntakeLimits.parsers`), so a 20 MB body of a million small objects costs its own
  request seconds, never the loop's, and its peak memory is paid once, not per body.

design/front-door.md says why bytes, not bodies, are what is bounded.
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
        bodies: large request bodies (more than ``inline_bytes`` arrived) read or parsed
            at once (one more: 503).
        held_bytes: bytes the bodies being read or parsed may hold together (more: 503).
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
        self.large = 0
        """Large bodies being read or parsed (each holds one of `IntakeLimits.bodies`)."""
        self.held = 0
        """Bytes the bodies being read or parsed hold together."""
        self._parsers = trio.CapacityLimiter(limits.parsers)

    @contextmanager
    def admit(self) -> Iterator[Holding]:
        """One body's share for the ``with`` block: its bytes are counted as they come
        (`Holding.take`), and given back, with its large body's slot if it took one, when
        the block ends. Admitting a body refuses nothing: only its bytes can be refused."""
        holding = Holding(self)
        try:
            yield holding
        finally:
            self.held -= holding.size
            if holding.is_large:
                self.large -= 1

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
    """One admitted body's share of `IntakeLimits.held_bytes`, and its large body's slot
    once it is large."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.size = 0
        self.is_large = False

    def take(self, size: int) -> None:
        """Count ``size`` more bytes of this body.

        Raises:
            BadRequest: 503 when the bodies read at once would hold more than
                `IntakeLimits.held_bytes` together, or when this body becomes large while
                `IntakeLimits.bodies` large bodies are read already.
        """
        intake = self.intake
        limits = intake.limits
        if intake.held + size > limits.held_bytes:
            raise BadRequest(
                f"the front door holds {intake.held} bytes of request bodies already, its "
                f"bound ({limits.held_bytes} bytes at once): try again when one is done",
                status=503,
            )
        if not self.is_large and self.size + size > limits.inline_bytes:
            if intake.large >= limits.bodies:
                raise BadRequest(
                    f"the front door is reading {intake.large} large request bodies (over "
                    f"{limits.inline_bytes} bytes) already, its bound ({limits.bodies} at "
                    "once): try again when one is done",
                    status=503,
                )
            self.is_large = True
            intake.large += 1
        intake.held += size
        self.size += size
