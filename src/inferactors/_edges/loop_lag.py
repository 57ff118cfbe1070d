"""How late our own event loop ran around a deadline: the one edge of the lateness rule.

The rule itself is pure (``_policy/lateness.py``): a deadline gives no verdict on a server
when more than ``LATE_S`` of its budget was lost to our own loop. This module measures that
loss, once per trio run, for every caller:

- `LoopLag` is a trio instrument (installed by `measure_loop_lag`, which a runtime calls
  as it opens unless its `Edges.measure_loop_lag` says not to; `loop_lag` answers the
  run's, measuring nothing until it is installed). Around
  each wait for I/O it notes when the loop stopped running tasks and when it ran again, and
  keeps every **stall** longer than `STALL_S`: a batch of task steps that ran that long
  (a blocked task, a thread holding the GIL, a CPU-starved process) or a wait for I/O that
  came back that long after its timeout (the process was not scheduled). Two clock reads
  per loop iteration; nothing is polled and nothing wakes the loop.
- `lateness` answers for one deadline: how late it fired, and how long the loop stalled
  between the start of the wait and the deadline.
- `no_verdict` applies the rule: None when the deadline was fair (judge the server), else
  the words of the no-verdict, noted as a sign of overload.
- The overload report: `LoopLag.reports` yields each start and end of an overload
  (`OverloadWatch`); the supervisor publishes them as its own events and status.

Times are trio time (`trio.current_time`). Under a virtual clock (trio's ``MockClock``)
time jumps inside a task step, which the instrument would count as a stall: tests that
run the runtime under one say ``Edges(measure_loop_lag=False)``, and nothing is measured.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator

import attrs
import trio

from .._policy.lateness import (
    CaughtUp,
    Lateness,
    Overload,
    OverloadWatch,
    judges_timeout,
    no_verdict_why,
)

STALL_S = 0.02
"""A run of task steps (or a wait past its timeout) longer than this is a stall (float
seconds); shorter ones only make the timers a little late, which the deadline's own
lateness counts."""

KEEP_S = 600.0
"""How long stalls are remembered (float seconds): longer than any deadline we set."""

KEEP_STALLS = 4096
"""At most this many stalls are remembered (a bound, not a policy)."""

KEEP_REPORTS = 64
"""At most this many overload reports are kept for readers that fall behind."""

Report = Overload | CaughtUp


@attrs.define(eq=False)
class LoopLag(trio.abc.Instrument):
    """The stalls of one trio run's loop and its overload state; get it with `loop_lag`."""

    clock: trio.abc.Clock
    watch: OverloadWatch = attrs.Factory(OverloadWatch)
    _ran_from: float = 0.0
    _wait_from: float = 0.0
    _stalls: collections.deque[tuple[float, float]] = attrs.Factory(
        lambda: collections.deque(maxlen=KEEP_STALLS)
    )
    _reports: list[Report] = attrs.Factory(list)
    _dropped: int = 0
    _changed: trio.Event = attrs.Factory(trio.Event)
    _token: trio.lowlevel.TrioToken | None = None
    _installed: bool = False

    # The instrument's hooks (trio calls them on every loop iteration).

    def before_io_wait(self, timeout: float) -> None:
        now = self.clock.current_time()
        if now - self._ran_from > STALL_S:
            self._stall(self._ran_from, now)
        self._wait_from = now

    def after_io_wait(self, timeout: float) -> None:
        now = self.clock.current_time()
        due = self._wait_from + timeout
        if now - due > STALL_S:
            self._stall(due, now)
        self._ran_from = now

    # What callers ask.

    def stalled_between(self, start: float, end: float) -> float:
        """Seconds the loop stalled between trio times ``start`` and ``end``, the run of
        steps under way included (a task that blocked just before this was asked)."""
        total = 0.0
        for began, ended in reversed(self._stalls):
            if ended <= start:
                break
            total += max(0.0, min(ended, end) - max(began, start))
        now = self.clock.current_time()
        if now - self._ran_from > STALL_S and self._installed:
            total += max(0.0, min(now, end) - max(self._ran_from, start))
        return total

    def lost_verdict(self, why: str) -> None:
        """A deadline gave no verdict (``why``): a sign of overload."""
        self._publish(self.watch.lost_verdict(self.clock.current_time(), why))

    @property
    def overloaded(self) -> Overload | None:
        """The overload under way, or None."""
        return self.watch.current

    async def reports(self) -> AsyncIterator[Report]:
        """Each overload and each catching up from now on, in order, until cancelled; the
        one reader that reaches an overload's calm time ends it (`OverloadWatch.calm`)."""
        seen = self._dropped + len(self._reports)
        while True:
            start = max(0, seen - self._dropped)
            for report in self._reports[start:]:
                seen += 1
                yield report
            calm_at = self.watch.calm_at()
            changed = self._changed
            if calm_at is None:
                await changed.wait()
                continue
            with trio.move_on_at(calm_at):
                await changed.wait()
                continue
            self._publish(self.watch.calm(self.clock.current_time()))

    def _stall(self, began: float, ended: float) -> None:
        if self._stalls and self._stalls[0][1] < ended - KEEP_S:
            self._stalls.popleft()
        self._stalls.append((began, ended))
        started = self.watch.stalled(ended, ended - began)
        if started is not None:
            self._publish(started, from_hook=True)

    def _publish(self, report: Report | None, *, from_hook: bool = False) -> None:
        if report is None:
            return
        self._reports.append(report)
        if len(self._reports) > KEEP_REPORTS:
            del self._reports[0]
            self._dropped += 1
        if from_hook and self._token is not None:
            self._token.run_sync_soon(self._wake)  # no task may be woken from a hook
        else:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


_LAG: trio.lowlevel.RunVar[LoopLag] = trio.lowlevel.RunVar("inferactors_loop_lag")


def loop_lag() -> LoopLag:
    """This trio run's `LoopLag` (made at the first call); it measures stalls once
    `measure_loop_lag` installed it, and none before."""
    try:
        return _LAG.get()
    except LookupError:
        pass
    lag = LoopLag(trio.lowlevel.current_clock())
    lag._token = trio.lowlevel.current_trio_token()
    lag._ran_from = lag._wait_from = lag.clock.current_time()
    _LAG.set(lag)
    return lag


def measure_loop_lag() -> LoopLag:
    """This trio run's `LoopLag`, installed as a trio instrument (once per run) so that
    it measures the loop's stalls from now on."""
    lag = loop_lag()
    if not lag._installed:
        lag._ran_from = lag._wait_from = lag.clock.current_time()
        trio.lowlevel.add_instrument(lag)
        lag._installed = True
    return lag


def lateness(started_at: float, deadline: float) -> Lateness:
    """Our loop's lateness around ``deadline`` (trio time), for a wait begun at
    ``started_at``, asked when the deadline fired (or the wait ended)."""
    now = trio.current_time()
    stalled = loop_lag().stalled_between(started_at, min(now, deadline))
    return Lateness(max(0.0, now - deadline), stalled)


def no_verdict(
    request: str, started_at: float, deadline: float, *, budget_s: float | None = None
) -> str | None:
    """None when a wait begun at ``started_at`` that hit ``deadline`` judges the server
    (`_policy.lateness.judges_timeout`: ``budget_s``, default the whole window, is the
    server's fair budget, less than the window when the deadline was stretched); else why
    it gives no verdict (`_policy.lateness.no_verdict_why`), noted as a sign of overload
    (`LoopLag.lost_verdict`)."""
    late = lateness(started_at, deadline)
    budget = deadline - started_at if budget_s is None else budget_s
    if judges_timeout(trio.current_time() - started_at, late, budget):
        return None
    why = no_verdict_why(request, late)
    loop_lag().lost_verdict(why)
    return why
