"""The supervisor's metrics in the Prometheus text format: `FleetMetrics`.

Made with prometheus-client on a registry of its own (never the process-wide default, so
two fleets in one process, or a host's own metrics, do not mix). It is fed three ways, all
synchronous and cheap, none of them I/O:

- `FleetMetrics.observe` with every event (restarts, exits by reason, time to ready, time
  to first token, deep health, exposure and tamper events, and the supervisor's own
  overload: ``inferactors_supervisor_overloaded`` 1 while it is, the overloads begun);
- `FleetMetrics.lost_verdicts` with the run's count of deadlines that gave no verdict
  (``_edges/loop_lag.py``), read live at each scrape, so the counter moves while the
  overload lasts, not only when it ends;
- `FleetMetrics.on_probe`, the runtimes' `Edges.on_probe` hook, with every probe report's
  latency (a measurement per instance per second: kept out of the event stream);
- `FleetMetrics.render` with the fleet's cached views, for the state gauges, when scraped;
- `FleetMetrics.engines` (``metrics_engines.py``) with what the servers report and cost,
  read by the fleet just before a render.

Every per-instance family has the labels ``instance`` (its name in the run file),
``flavor`` and ``mode``; `FleetMetrics.forget` drops every series of an instance a reload
removed. All durations are seconds. No family carries a ``_created`` series (a counter's
creation time is noise for every reader of this endpoint). Every metric is listed in
``docs/metrics.md`` (``tests/service/test_metrics_docs.py`` holds the two together).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from importlib.metadata import PackageNotFoundError, version

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from .._edges.bundle import ProbeTimed
from .._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    Event,
    ExposureDetected,
    ModelTampered,
    ProcessExited,
    ProcessStarted,
    RestartScheduled,
    StateChanged,
    SupervisorCaughtUp,
    SupervisorOverloaded,
    instance_of,
)
from .._status import InstanceState
from .metrics_engines import EngineFigures
from .residency_metrics import DoorMetrics
from .views import InstanceView

LABELS = ("instance", "flavor", "mode")
PROBE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Probe latency buckets (seconds): a local probe takes about 1 to 5 ms."""
DEEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Deep health buckets (seconds): one token from a tiny model to a large one on a CPU."""


def package_version() -> str:
    """inferactors' installed version, or ``"unknown"``."""
    try:
        return version("inferactors")
    except PackageNotFoundError:
        return "unknown"


@attrs.define(eq=False)
class FleetMetrics:
    """The metrics of one supervisor; make one with `FleetMetrics.create`."""

    registry: CollectorRegistry
    _state: Gauge
    _instances: Gauge
    _restarts: Counter
    _exits: Counter
    _probe: Histogram
    _deep: Histogram
    _deep_failed: Counter
    _ready: Gauge
    _ttft: Gauge
    _exposure: Counter
    _tamper: Counter
    _overloaded: Gauge
    _overloads: Counter
    _no_verdicts: Counter
    engines: EngineFigures = attrs.Factory(EngineFigures)
    _last_overload: SupervisorOverloaded | SupervisorCaughtUp | None = None
    _no_verdicts_seen: int = 0
    _labels: dict[str, tuple[str, str, str]] = attrs.Factory(dict)
    _started_at: dict[str, float] = attrs.Factory(dict)
    door: DoorMetrics = attrs.field(init=False)
    """The front door scheduler's families (``residency_metrics.py``), its observer."""

    def __attrs_post_init__(self) -> None:
        self.door = DoorMetrics.create(self.registry)

    @classmethod
    def create(cls, build_version: str | None = None) -> FleetMetrics:
        """Fresh metrics on a new registry; ``inferactors_up`` is 1 and ``build_info``
        carries ``build_version`` (default: the installed package's version)."""
        reg = CollectorRegistry(auto_describe=True)
        gauge, counter = partial(Gauge, registry=reg), partial(Counter, registry=reg)
        histogram = partial(Histogram, labelnames=LABELS, registry=reg)
        metrics = cls(
            reg,
            gauge("inferactors_instance_state", "1 for the current state", (*LABELS, "state")),
            gauge("inferactors_instances", "Instances in the run file"),
            counter("inferactors_restarts", "Restarts scheduled", LABELS),
            counter("inferactors_process_exits", "Exits by reason", (*LABELS, "reason")),
            histogram("inferactors_probe_duration_seconds", "Probes", buckets=PROBE_BUCKETS),
            histogram(
                "inferactors_deep_health_duration_seconds",
                "Deep health passed: its time to first token",
                buckets=DEEP_BUCKETS,
            ),
            counter("inferactors_deep_health_failures", "Deep health failed", LABELS),
            gauge("inferactors_time_to_ready_seconds", "Last spawn to Running", LABELS),
            gauge("inferactors_time_to_first_token_seconds", "Last deep health TTFT", LABELS),
            counter("inferactors_exposure_events", "Exposure detected", LABELS),
            counter("inferactors_tamper_events", "Model tampered", LABELS),
            gauge("inferactors_supervisor_overloaded", "1 while the supervisor's loop runs late"),
            counter("inferactors_supervisor_overloads", "Overloads of the supervisor begun"),
            counter(
                "inferactors_supervisor_no_verdicts",
                "Deadlines that gave no verdict for our own lateness (counted as they happen)",
            ),
        )
        reg.register(metrics.engines)
        gauge("inferactors_up", "1 while the supervisor runs").set(1)
        info = gauge("inferactors_build_info", "inferactors' version", ("version",))
        info.labels(build_version or package_version()).set(1)
        return metrics

    def track(self, views: Iterable[InstanceView]) -> None:
        """Learn each instance id's labels (call after a load or reload)."""
        for view in views:
            self.door.track(view)
            if view.instance_id is not None:
                self._labels[view.instance_id] = (view.name, view.flavor, view.mode)

    def forget(self, name: str) -> None:
        """Drop every series of the instance ``name`` from every per-instance family, and
        ignore the later events of its instance ids (a reload removed it)."""
        for family in (*self._families(), *self.door.families()):
            family.remove_by_labels({"instance": name})
        self.engines.scrapes.pop(name, None)
        self.engines.usage.pop(name, None)
        for iid in [iid for iid, labels in self._labels.items() if labels[0] == name]:
            del self._labels[iid]
            self._started_at.pop(iid, None)

    def _families(self) -> tuple[Gauge | Counter | Histogram, ...]:
        return (
            self._state,
            self._restarts,
            self._exits,
            self._probe,
            self._deep,
            self._deep_failed,
            self._ready,
            self._ttft,
            self._exposure,
            self._tamper,
        )

    def observe(self, event: Event, views: Iterable[InstanceView] = ()) -> None:
        """Count ``event``; ``views``, when given, are tracked first (`track`). An event of
        an instance id never tracked is ignored."""
        self.track(views)
        if isinstance(event, SupervisorOverloaded | SupervisorCaughtUp):
            self._supervisor(event)
            return
        self.door.observe(event)
        labels = self._labels.get(instance_of(event) or "")  # EventsLost: none
        if labels is not None:
            self._count(event, labels)

    def _supervisor(self, event: SupervisorOverloaded | SupervisorCaughtUp) -> None:
        """The supervisor's own state; each runtime of the fleet reports the same overload
        of the one event loop, so a repeated report is counted once."""
        if event == self._last_overload:
            return
        self._last_overload = event
        if isinstance(event, SupervisorOverloaded):
            self._overloaded.set(1)
            self._overloads.inc()
        else:
            self._overloaded.set(0)

    def lost_verdicts(self, total: int) -> None:
        """The run's count so far of deadlines that gave no verdict (`LoopLag`'s
        ``watch.no_verdicts_total``): the counter follows it while the overload lasts."""
        if total > self._no_verdicts_seen:
            self._no_verdicts.inc(total - self._no_verdicts_seen)
            self._no_verdicts_seen = total

    def on_probe(self, timed: ProbeTimed) -> None:
        """The `Edges.on_probe` hook: one probe's latency into the histogram."""
        labels = self._labels.get(timed.instance_id)
        if labels is not None:
            self._probe.labels(*labels).observe(timed.latency_s)

    def render(self, views: Sequence[InstanceView]) -> bytes:
        """The Prometheus text of every metric, the state gauges set from ``views``."""
        self.track(views)
        self._state.clear()
        for view in views:
            for state in InstanceState:
                current = 1.0 if view.status.state is state else 0.0
                self._state.labels(view.name, view.flavor, view.mode, state.value).set(current)
        self._instances.set(len(views))
        self.door.render(views)
        return generate_latest(_WithoutCreated(self.registry))

    def labels_of(self, name: str) -> tuple[str, str, str] | None:
        """The (instance, flavor, mode) labels of the instance ``name``, once tracked."""
        return next((labels for labels in self._labels.values() if labels[0] == name), None)

    def _count(self, event: Event, labels: tuple[str, str, str]) -> None:
        match event:
            case ProcessStarted():
                self._started_at[event.instance_id] = event.at
            case StateChanged() if event.new is InstanceState.RUNNING:
                started = self._started_at.pop(event.instance_id, None)
                if started is not None:
                    self._ready.labels(*labels).set(max(0.0, event.at - started))
            case ProcessExited():
                self._started_at.pop(event.instance_id, None)
                self._exits.labels(*labels, event.reason.value).inc()
            case RestartScheduled():
                self._restarts.labels(*labels).inc()
            case DeepHealthPassed():
                self._ttft.labels(*labels).set(event.ttft_s)
                self._deep.labels(*labels).observe(event.ttft_s)
            case DeepHealthFailed():
                self._deep_failed.labels(*labels).inc()
            case ExposureDetected():
                self._exposure.labels(*labels).inc()
            case ModelTampered():
                self._tamper.labels(*labels).inc()


@attrs.frozen
class _WithoutCreated:
    """The registry's families without their ``_created`` samples."""

    registry: CollectorRegistry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family
