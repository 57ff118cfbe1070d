"""How often long work says how far it got, and what it says: `ProgressPace`.

Pure (no I/O, no clock of its own: every call is given ``now``, float seconds). Work that
reports after every chunk (hashing a model: one call per 4 MiB) is shown at most once per
``interval_s`` and once more when it is done, with its rate (bytes a second since the
first report) and the time it still needs at that rate.
"""

from __future__ import annotations

import attrs

SHOWN_EVERY_S = 1.0
"""The least time between two progress reports of one piece of work (1 s)."""


@attrs.frozen
class Reading:
    """How far one piece of work got, as shown.

    Attributes:
        done: units done (bytes for hashing).
        total: units in all (0 when unknown).
        elapsed_s: seconds since its first report.
        rate: units a second since its first report (0.0 before any time passed).
        eta_s: seconds still needed at that rate, or None when unknown.
    """

    done: int
    total: int
    elapsed_s: float
    rate: float
    eta_s: float | None

    @property
    def finished(self) -> bool:
        """Whether every unit is done (a total of 0 is never finished)."""
        return self.total > 0 and self.done >= self.total


@attrs.define
class ProgressPace:
    """The pace of one piece of work's reports; `offer` each report, show what it returns.

    Attributes:
        interval_s: the least time between two shown reports.
    """

    interval_s: float = SHOWN_EVERY_S
    shown_any: bool = False
    """Whether a reading was shown yet (a final reading is only shown after one)."""
    _started: tuple[float, int] | None = None
    _shown_at: float = 0.0

    def offer(self, now: float, done: int, total: int) -> Reading | None:
        """The reading to show for ``done`` of ``total`` at ``now``, or None when the last
        one shown is under ``interval_s`` old (the first report starts the clock and is not
        shown: work that ends within ``interval_s`` says nothing; the final one, ``done >=
        total``, is shown when anything was shown before it)."""
        if self._started is None:
            self._started, self._shown_at = (now, done), now
            return None
        final = self.shown_any and 0 < total <= done
        if now - self._shown_at < self.interval_s and not final:
            return None  # the common case, per chunk: nothing built
        self._shown_at, self.shown_any = now, True
        return self.reading(now, done, total)

    def reading(self, now: float, done: int, total: int) -> Reading:
        """The reading at ``now`` whether due or not (`offer` decides when)."""
        started, first = self._started if self._started is not None else (now, done)
        elapsed = max(0.0, now - started)
        rate = (done - first) / elapsed if elapsed > 0 else 0.0
        left = max(0, total - done)
        eta = left / rate if rate > 0 and total > 0 else None
        return Reading(done, total, elapsed, rate, eta)
