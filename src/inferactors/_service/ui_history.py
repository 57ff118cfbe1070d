"""What the web page plots and lists of each instance: `UiHistory`, a bounded in-memory
history the fleet keeps from its start (nothing on disk, no database).

Per instance, by its name in the run file, over the last `WINDOW_S`:

- probe latency: every probe report (about one a second) folded into `STEP_S` buckets,
  each the mean and the largest latency of its probes (float seconds);
- time to first token: each deep health that passed;
- restarts: the time of each restart scheduled;
- resident memory and CPU of the server's process tree: one reading every `STEP_S`
  (`sample_usage`), bytes and percent of one core (CPU seconds over the step);
- its last `TIMELINE` events, dated.

Times are wall-clock unix seconds. An event carries the supervisor's monotonic time
(trio's); `UiHistory.wall_of` dates it by the wall clock of the moment it is heard less
the monotonic time since it happened: the one place an event gets its date.

Every series is a deque with a fixed bound (`POINTS` points, `TIMELINE` events) and is cut
to the window when read; instances gone from the run file are dropped at the next reading
(`UiHistory.keep_only`). Fed synchronously by the fleet (no I/O, never waits), except the
readings of `sample_usage`, taken in a worker thread.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from .._edges.engine_metrics import TreeUsage, tree_usage
from .._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    Event,
    ExposureDetected,
    GaveUp,
    ImpostorDetected,
    InstanceCrashed,
    ModelTampered,
    ProcessExited,
    RestartFailed,
    RestartScheduled,
)
from .._stop_reasons import StopReason
from .views import InstanceView

STEP_S = 5.0
"""The width of a probe-latency bucket and the period of the usage readings, seconds."""
WINDOW_S = 3600.0
"""How far back the plots go, seconds."""
POINTS = math.ceil(WINDOW_S / STEP_S)
"""The most points one series keeps (a window's worth of steps)."""
TIMELINE = 200
"""The most events one instance's timeline keeps."""


_QUIET_STOPS = frozenset(
    {StopReason.REQUESTED, StopReason.SHUTDOWN, StopReason.UNLOAD, StopReason.TTL,
     StopReason.EVICTED, StopReason.RELOAD}
)  # fmt: skip
"""Stop reasons that are no failure."""
_FAILURES = (GaveUp, InstanceCrashed, DeepHealthFailed, RestartFailed, ExposureDetected,
             ImpostorDetected, ModelTampered)  # fmt: skip


def failure(event: Event) -> bool:
    """Whether the page marks ``event`` as a failure: an exit for any reason but a stop
    asked for (an operator, the front door, a reload, the supervisor's own end), a
    give-up, a crash of the instance's own code, a failed deep health or restart, an
    exposure, an impostor, a tampered model."""
    if isinstance(event, ProcessExited):
        return event.reason not in _QUIET_STOPS
    return isinstance(event, _FAILURES)


@attrs.frozen
class Dated:
    """An event and its wall-clock date (unix seconds)."""

    at: float
    event: Event


@attrs.define(eq=False)
class _Bucket:
    """Probe latencies within one step: its start, their sum, largest and count."""

    start: float
    total: float = 0.0
    largest: float = 0.0
    count: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def add(self, latency_s: float) -> None:
        self.total += latency_s
        self.largest = max(self.largest, latency_s)
        self.count += 1


@attrs.define(eq=False)
class InstanceHistory:
    """One instance's series (module docstring)."""

    probe: deque[_Bucket] = attrs.Factory(lambda: deque(maxlen=POINTS))
    ttft: deque[tuple[float, float]] = attrs.Factory(lambda: deque(maxlen=POINTS))
    restarts: deque[float] = attrs.Factory(lambda: deque(maxlen=POINTS))
    usage: deque[tuple[float, int, float | None]] = attrs.Factory(lambda: deque(maxlen=POINTS))
    timeline: deque[Dated] = attrs.Factory(lambda: deque(maxlen=TIMELINE))
    last_cpu: tuple[int, float, float] | None = None
    """(pid, wall time, CPU seconds) of the last reading: the next one's CPU percent."""
    last_usage: tuple[int, int, float | None] | None = None
    """(pid, resident bytes, CPU percent) of the last reading, for the instance's row."""
    last_failure: Dated | None = None
    """Its last server exit that was a failure (`failure`): the server's last words."""

    def add_probe(self, at: float, latency_s: float) -> None:
        start = at - at % STEP_S
        if not self.probe or self.probe[-1].start != start:
            self.probe.append(_Bucket(start))
        self.probe[-1].add(latency_s)

    def add_usage(self, at: float, pid: int, used: TreeUsage) -> None:
        percent = None
        if self.last_cpu is not None and self.last_cpu[0] == pid and at > self.last_cpu[1]:
            spent = used.cpu_s - self.last_cpu[2]
            percent = max(spent, 0.0) / (at - self.last_cpu[1]) * 100.0
        self.last_cpu = (pid, at, used.cpu_s)
        self.last_usage = (pid, used.rss_bytes, percent)
        self.usage.append((at, used.rss_bytes, percent))

    def series(self, since: float) -> dict[str, Any]:
        """Every series from ``since`` (wall seconds) on, as JSON-ready lists."""
        return {
            "probe": [[b.start, b.mean, b.largest] for b in self.probe if b.start >= since],
            "ttft": [[at, value] for at, value in self.ttft if at >= since],
            "restarts": [at for at in self.restarts if at >= since],
            "memory": [[at, rss] for at, rss, _ in self.usage if at >= since],
            "cpu": [[at, cpu] for at, _, cpu in self.usage if at >= since and cpu is not None],
        }


@attrs.define(eq=False)
class UiHistory:
    """Every instance's `InstanceHistory` (module docstring).

    ``wall`` and ``monotonic`` are the clocks (unix seconds and trio's time): a test sets
    its own.
    """

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = trio.current_time
    _by_name: dict[str, InstanceHistory] = attrs.Factory(dict)
    _sampled: trio.Event = attrs.Factory(trio.Event)

    def of(self, name: str) -> InstanceHistory:
        """The history of ``name`` (an empty one, kept, the first time)."""
        return self._by_name.setdefault(name, InstanceHistory())

    def wall_of(self, event: Event) -> float:
        """``event``'s wall-clock date, unix seconds (module docstring)."""
        return self.wall() - max(self.monotonic() - event.at, 0.0)

    def on_event(self, name: str, event: Event) -> None:
        """One event of the instance ``name``: dated into its timeline, and into its
        series when it is a restart or a deep health that passed."""
        dated = Dated(self.wall_of(event), event)
        history = self.of(name)
        history.timeline.append(dated)
        if isinstance(event, ProcessExited) and failure(event):
            history.last_failure = dated
        if isinstance(event, RestartScheduled):
            history.restarts.append(dated.at)
        elif isinstance(event, DeepHealthPassed):
            history.ttft.append((dated.at, event.ttft_s))

    def on_probe(self, name: str, latency_s: float) -> None:
        """One probe of ``name`` took ``latency_s`` float seconds (reported now)."""
        self.of(name).add_probe(self.wall(), latency_s)

    def on_usage(self, readings: Mapping[str, tuple[int, TreeUsage]]) -> None:
        """One reading of each named instance's process tree (pid, usage), taken now;
        wakes `until_sampled`."""
        now = self.wall()
        for name, (pid, used) in readings.items():
            self.of(name).add_usage(now, pid, used)
        self._sampled.set()
        self._sampled = trio.Event()

    async def until_sampled(self) -> None:
        """Wait for the next `on_usage`."""
        await self._sampled.wait()

    def keep_only(self, names: Iterable[str]) -> None:
        """Drop the history of every instance not named (gone from the run file)."""
        kept = set(names)
        for name in [name for name in self._by_name if name not in kept]:
            del self._by_name[name]

    def timeline(self, name: str) -> tuple[Dated, ...]:
        """``name``'s last events, oldest first."""
        return tuple(self.of(name).timeline) if name in self._by_name else ()

    def last_failure(self, name: str) -> Dated | None:
        """``name``'s last server exit that was a failure, else None."""
        return self._by_name[name].last_failure if name in self._by_name else None

    def series(self, name: str) -> dict[str, Any]:
        """``name``'s series over the last `WINDOW_S` (`InstanceHistory.series`)."""
        return self.of(name).series(self.wall() - WINDOW_S)

    def latest(self, name: str) -> dict[str, Any]:
        """``name``'s newest points: its probe bucket (``[start, mean, max]``), memory and
        CPU readings (``[at, value]``), each None when there is none."""
        history = self.of(name)
        bucket = history.probe[-1] if history.probe else None
        usage = history.usage[-1] if history.usage else None
        return {
            "probe": None if bucket is None else [bucket.start, bucket.mean, bucket.largest],
            "memory": None if usage is None else [usage[0], usage[1]],
            "cpu": None if usage is None or usage[2] is None else [usage[0], usage[2]],
        }

    def usage_now(self, name: str, pid: int | None) -> tuple[int | None, float | None]:
        """(resident bytes, CPU percent) of ``name``'s last reading when it was of
        ``pid``, else (None, None)."""
        last = self._by_name[name].last_usage if name in self._by_name else None
        if pid is None or last is None or last[0] != pid:
            return (None, None)
        return (last[1], last[2])


async def sample_usage(
    views: Callable[[], Iterable[InstanceView]], history: UiHistory, every_s: float = STEP_S
) -> None:
    """Read the process tree of every instance that has a live process, every
    ``every_s`` float seconds, into ``history`` (in a worker thread), until cancelled;
    instances no longer in ``views`` are dropped from ``history``."""
    while True:
        await trio.sleep(every_s)
        shown = list(views())
        live = {view.name: view.status.pid for view in shown if view.status.pid is not None}
        readings = await trio.to_thread.run_sync(_read_trees, live)
        history.keep_only(view.name for view in shown)
        history.on_usage(readings)


def _read_trees(pids: Mapping[str, int]) -> dict[str, tuple[int, TreeUsage]]:
    """Each named process tree's usage (blocking: reads ``/proc``); gone ones left out."""
    readings = {}
    for name, pid in pids.items():
        used = tree_usage(pid)
        if used is not None:
            readings[name] = (pid, used)
    return readings
