"""Start-up slots: how many managed servers of one trio run start at the same moment.

Fifty servers spawned at once each spend their first moments on the CPU (a Python server
imports for 0.2 to 0.5 s, llama-server maps and checks its model), and on a small machine
the supervisor's own loop then waits its turn behind them: measured here on 2 cores, a
bare trio loop that only sleeps ran up to 250 ms late while 50 fake servers started, the
supervisor's up to a second. So a spawn first takes one of `slot_count` slots and holds it
until the server says it is ready (its readiness line: llama-server's ``model loaded`` /
``listening``, mlx_lm.server's ``Starting httpd``), it exits, or `HOLD_S` passed, whichever
comes first; the 50 then start a few at a time, each as fast as alone.

Only the real spawn (``spawn.open_child_process``) takes a slot; an injected opener (the
test kit's fake processes) does not.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import attrs
import trio

HOLD_S = 2.0
"""The longest one server holds a start-up slot (float seconds): a server that prints no
readiness line, or loads a large model, lets the next one start after this long."""


def slot_count() -> int:
    """Servers of one run that may be starting at once: the machine's cores, at least 2."""
    return max(2, os.cpu_count() or 2)


_SLOTS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar(
    "inferactors_startup_slots"
)


def _limiter() -> trio.CapacityLimiter:
    try:
        return _SLOTS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(slot_count())
        _SLOTS.set(limiter)
        return limiter


@attrs.define(eq=False)
class StartupSlot:
    """One taken slot; `release` is idempotent."""

    _limiter: trio.CapacityLimiter
    _held: bool = True

    @classmethod
    async def take(cls) -> StartupSlot:
        """Wait for a free slot of this run and take it."""
        limiter = _limiter()
        slot = cls(limiter)
        await limiter.acquire_on_behalf_of(slot)
        return slot

    def release(self) -> None:
        """Give the slot back (once)."""
        if self._held:
            self._held = False
            self._limiter.release_on_behalf_of(self)

    async def hold_until(self, *signs: Callable[[], Awaitable[object]]) -> None:
        """Keep the slot until the first of ``signs`` (async callables: a readiness line,
        the exit) returns or `HOLD_S` passed; then (or when cancelled) release it."""
        try:
            with trio.move_on_after(HOLD_S) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.sleep_forever)  # no sign yet: the bound
                    for sign in signs:
                        nursery.start_soon(_then_cancel, sign, scope)
        finally:
            self.release()


async def _then_cancel(sign: Callable[[], Awaitable[object]], scope: trio.CancelScope) -> None:
    await sign()
    scope.cancel()
