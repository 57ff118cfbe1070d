"""The front door scheduler's metrics, on the fleet's registry (``metrics.py``):
`DoorMetrics`.

- ``inferactors_front_door_queue_depth``: requests waiting, per instance (gauge);
- ``inferactors_front_door_in_flight``: requests granted and not done, per instance;
- ``inferactors_front_door_wait_seconds``: how long granted requests waited (histogram);
- ``inferactors_front_door_refusals_total``: refusals by ``kind`` (``instance`` is empty
  for a model no instance serves);
- ``inferactors_residency_stops_total``: the scheduler's stops by ``reason`` (``ttl``,
  ``evicted``, ``requested``, ``reload``, ``shutdown``);
- ``inferactors_on_demand_starts_total``: starts the scheduler made;
- ``inferactors_resident_bytes``: each instance's ``figure`` (``declared``,
  ``estimated``, ``measured`` once measured), bytes;
- ``inferactors_resident``: 1 while the instance holds memory (resident, starting or
  stopping).

Per-instance families carry ``instance``, ``flavor`` and ``mode`` as the fleet's others.
Fed by the scheduler's observer hooks (`granted`, `refused`), its events (`observe`) and
the fleet's views when scraped (`render`); all synchronous, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .._actors.front_door_seam import Residency
from .._errors import RefusalKind
from .._events import Event, OnDemandStart, ResidencyStop, instance_of
from .views import InstanceView

LABELS = ("instance", "flavor", "mode")
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Wait buckets (seconds): a grant at once, a warm swap, a cold start, a long queue."""


@attrs.define(eq=False)
class DoorMetrics:
    """The scheduler's families (module docstring); make with `DoorMetrics.create`."""

    _queue: Gauge
    _in_flight: Gauge
    _wait: Histogram
    _refusals: Counter
    _stops: Counter
    _starts: Counter
    _bytes: Gauge
    _resident: Gauge
    labels: dict[str, tuple[str, str, str]] = attrs.Factory(dict)
    """An instance's labels by its name (its instance id's are the fleet's)."""
    _by_iid: dict[str, tuple[str, str, str]] = attrs.Factory(dict)

    @classmethod
    def create(cls, registry: CollectorRegistry) -> DoorMetrics:
        """The families, on ``registry``."""
        gauge, counter = partial(Gauge, registry=registry), partial(Counter, registry=registry)
        return cls(
            gauge("inferactors_front_door_queue_depth", "Requests waiting", LABELS),
            gauge("inferactors_front_door_in_flight", "Requests granted, not done", LABELS),
            Histogram(
                "inferactors_front_door_wait_seconds",
                "How long granted requests waited",
                LABELS,
                buckets=WAIT_BUCKETS,
                registry=registry,
            ),
            counter("inferactors_front_door_refusals", "Requests refused", (*LABELS, "kind")),
            counter("inferactors_residency_stops", "Stops by the scheduler", (*LABELS, "reason")),
            counter("inferactors_on_demand_starts", "Starts by the scheduler", LABELS),
            gauge("inferactors_resident_bytes", "Memory figures", (*LABELS, "figure")),
            gauge("inferactors_resident", "1 while it holds memory", LABELS),
        )

    def families(self) -> tuple[Gauge | Counter | Histogram, ...]:
        """The per-instance families (for the fleet's `forget`)."""
        return (
            self._queue,
            self._in_flight,
            self._wait,
            self._refusals,
            self._stops,
            self._starts,
            self._bytes,
            self._resident,
        )

    def track(self, view: InstanceView) -> None:
        """Learn an instance's labels by its name and its instance id."""
        labels = (view.name, view.flavor, view.mode)
        self.labels[view.name] = labels
        if view.instance_id is not None:
            self._by_iid[view.instance_id] = labels

    # The scheduler's observer.

    def granted(self, name: str, waited_s: float) -> None:
        """A request for ``name`` was granted after ``waited_s`` seconds."""
        labels = self.labels.get(name)
        if labels is not None:
            self._wait.labels(*labels).observe(waited_s)

    def refused(self, name: str | None, kind: RefusalKind) -> None:
        """A request was refused (``name`` None: no instance has that model)."""
        labels = self.labels.get(name or "", ("", "", ""))
        self._refusals.labels(*labels, kind.value).inc()

    # Events and views.

    def observe(self, event: Event) -> None:
        """Count the scheduler's stops and starts."""
        labels = self._by_iid.get(instance_of(event) or "")
        if labels is None:
            return
        if isinstance(event, ResidencyStop):
            self._stops.labels(*labels, event.reason.value).inc()
        elif isinstance(event, OnDemandStart):
            self._starts.labels(*labels).inc()

    def render(self, views: Sequence[InstanceView]) -> None:
        """Set the gauges from the views' residency figures."""
        for family in (self._queue, self._in_flight, self._bytes, self._resident):
            family.clear()
        for view in views:
            residency = view.residency
            if residency is None:
                continue
            labels = (view.name, view.flavor, view.mode)
            self._queue.labels(*labels).set(residency.queued)
            self._in_flight.labels(*labels).set(residency.in_flight)
            held = residency.residency is not Residency.NOT_LOADED
            self._resident.labels(*labels).set(1.0 if held else 0.0)
            self._bytes.labels(*labels, "declared").set(residency.declared_bytes)
            self._bytes.labels(*labels, "estimated").set(residency.estimated_bytes)
            if residency.measured_bytes is not None:
                self._bytes.labels(*labels, "measured").set(residency.measured_bytes)
