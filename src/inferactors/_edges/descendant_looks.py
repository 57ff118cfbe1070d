"""When a running server's descendants are looked at (`Descendants.track`).

A look walks the server's tree (0.1 to 0.7 ms for the real llama-server's 14 threads;
``descendants.py``), so it is made when something needs it, not on a fixed beat:

- on demand (`DescendantLooks.look`): the record refresh once a second while the server
  runs, the identity check, right before a stop;
- on a timer, for a server without a cgroup only (`DescendantLooks.on_timer`): once no
  look was made for `TRACK_S` * 1.5. Every look moves the timer's deadline on, so while
  the refresh looks the timer never wakes (on this VM a wake of the loop from sleep costs
  more CPU than the look itself); when nobody else looks, it looks every `TRACK_S`;
- through a stop's grace, every `STOP_TRACK_S` (`DescendantLooks.through_grace`): what a
  server starts on SIGTERM stays in its tree while its leader lives, and would be lost to
  init with its exit. A cgroup holds all of that anyway: no looks then.
"""

from __future__ import annotations

import attrs
import trio

from .descendants import Descendants

TRACK_S = 1.0
"""How often a running server without a cgroup is looked at when nobody else looks (s)."""

STOP_TRACK_S = 0.05
"""How often a stop's grace looks for new descendants of a server without a cgroup (s)."""


@attrs.define(eq=False)
class DescendantLooks:
    """The looks at one server's ``descendants``; see the module notes."""

    descendants: Descendants
    _timer: trio.CancelScope = attrs.Factory(trio.CancelScope)

    def look(self) -> tuple[int, ...]:
        """Track the descendants now (`Descendants.track`: the live outsiders) and move the
        timer's next look to `TRACK_S` * 1.5 from now. In the trio thread."""
        self._timer.deadline = trio.current_time() + TRACK_S * 1.5
        return self.descendants.track()

    async def on_timer(self, exited: trio.Event) -> None:
        """Look whenever no look was made for a while (`TRACK_S` after the start, then
        `TRACK_S` * 1.5 after each look), until ``exited`` is set."""
        while not exited.is_set():
            self._timer = trio.CancelScope(deadline=trio.current_time() + TRACK_S)
            with self._timer:
                await exited.wait()
            if self._timer.cancelled_caught:
                self.look()

    async def through_grace(self, exited: trio.Event) -> None:
        """Until ``exited`` is set, look every `STOP_TRACK_S` (a server without a cgroup)
        or only wait (with one)."""
        while not exited.is_set():
            with trio.move_on_after(STOP_TRACK_S):
                await exited.wait()
            if self.descendants.cgroup is None and not exited.is_set():
                self.descendants.track()
