"""How many of a server's output lines are read one by one, and how many only counted:
`LinePace` (pure; no I/O, no event loop: the caller passes the time).

Each line a server writes costs the supervisor some microseconds of Python on its event
loop (decoding, the start-up fault and readiness patterns, the ring, the followers, the
file). A server that floods (a 7 MB burst of load logs, a debug log that never stops)
would otherwise take the loop from every other instance. So each process has a token
bucket of lines (the classic one: a rate and a burst): a line that finds a token is read
and kept; one that finds none is dropped, its bytes still counted and still in the run's
evidence (its head and tail), and a marker line later says how many went. The pipe is
always emptied at once: the server never waits on us.

`KEEP_LINES_PER_S` and `KEEP_BURST_LINES` are far above what a server says in normal work
(llama-server prints about 300 lines while it loads, then one or two per request) and far
below what a loop can afford (2,000 lines a second cost about 30 ms of it).
"""

from __future__ import annotations

import attrs

KEEP_LINES_PER_S = 2000.0
"""Lines of one process read and kept each second, once its burst is spent."""
KEEP_BURST_LINES = 4000
"""Lines of one process read and kept at once (a start-up's logs) before the rate holds."""


@attrs.define
class LinePace:
    """A token bucket of lines: ``rate_per_s`` tokens a second, at most ``burst`` held.

    Times are float seconds on any monotonic clock (the trio clock in the supervisor); the
    bucket starts full at its first use.
    """

    rate_per_s: float = KEEP_LINES_PER_S
    burst: int = KEEP_BURST_LINES
    _tokens: float = attrs.field(init=False, default=-1.0)
    _at: float = attrs.field(init=False, default=0.0)

    def take(self, now: float, lines: int) -> int:
        """How many of ``lines`` lines (the first ones) may be kept at ``now``; those are
        spent. Never more than ``lines``, never negative."""
        if self._tokens < 0:
            self._tokens, self._at = float(self.burst), now
        elapsed = max(0.0, now - self._at)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate_per_s)
        self._at = now
        kept = min(lines, int(self._tokens))
        self._tokens -= kept
        return max(0, kept)
