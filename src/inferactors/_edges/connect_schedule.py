"""When each server's exposure connect check is next due (`SystemNetScanner`).

The kernel's socket table answers "is it listening beyond loopback?" every 200 ms; the
connect check catches what the table cannot show (a forwarded
port) and so runs far less often, spread so that servers started together never connect
together. A connect that gave no verdict (``_policy/lateness.py``: silence on loopback, or
our own loop ran late) is due again soon (`RETRY_S`, doubling up to the usual interval), so
a verdict lost to our lateness is re-checked promptly, never turned into "reachable".
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable

import attrs
import trio

_SCHEDULE_LIMIT = 4096

RETRY_S = 0.2
"""The first re-check after a connect gave no verdict (float seconds): one exposure tick."""


@attrs.define(eq=False)
class ConnectSchedule:
    """When each server's exposure connect check is next due (trio time, float seconds).

    The first scan of a server connects; then one connect every ``every_s`` (default 5 s),
    each interval drawn from [0.75, 1.25] x ``every_s`` by ``random`` so servers started
    together drift apart. Entries not due for a minute are forgotten."""

    every_s: float = 5.0
    random: Callable[[], float] = _random.random
    _due: dict[tuple[int, int], float] = attrs.Factory(dict)
    _retries: dict[tuple[int, int], int] = attrs.Factory(dict)

    def take(self, pid: int, port: int) -> bool:
        """Whether a connect is due now for ``(pid, port)``; if so, books the next one."""
        now = trio.current_time()
        if now < self._due.get((pid, port), now):
            return False
        if len(self._due) > _SCHEDULE_LIMIT:
            self._due = {key: at for key, at in self._due.items() if at > now - 60.0}
        self._due[(pid, port)] = now + self.every_s * (0.75 + 0.5 * self.random())
        return True

    def retry(self, pid: int, port: int) -> None:
        """The connect just taken gave no verdict: due again after `RETRY_S`, doubling with
        each further no-verdict in a row, never later than ``every_s``."""
        key = (pid, port)
        streak = self._retries.get(key, 0)
        if len(self._retries) > _SCHEDULE_LIMIT:
            self._retries.clear()
        self._retries[key] = streak + 1
        self._due[key] = trio.current_time() + min(self.every_s, RETRY_S * 2**streak)

    def settled(self, pid: int, port: int) -> None:
        """A connect (or none) gave its verdict: the retry streak of ``(pid, port)`` ends."""
        self._retries.pop((pid, port), None)
