"""The front door's request metrics (Prometheus, through prometheus-client): `FrontDoorMetrics`
and `Measured`, the ASGI middleware that feeds them.

Families (durations in seconds):

- ``inferactors_front_door_requests_total{model, dialect, code}``: requests answered, by
  the model they named (empty when none of the front door's models was named: an unknown
  name never becomes a label, so a client cannot grow the series), the dialect of the route
  and the HTTP status;
- ``inferactors_front_door_request_duration_seconds{model}``: from the request's arrival to
  its last byte (a stream's last chunk) or the client's disconnect;
- ``inferactors_front_door_first_byte_seconds{model}``: from the arrival to the first byte
  of the answer's body (a stream's first chunk), the latency a client sees;
- ``inferactors_front_door_requests_in_flight``: requests being answered now.

They go on a registry given by the caller: ``inferactors run`` gives the fleet's, so the
control API's ``/metrics`` shows them beside the supervisor's own.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._policy.dialects import Dialect

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0,
)  # fmt: skip
"""Request and first-byte buckets (seconds): a one-token answer of a tiny model to a long
generation of a large one."""

MODEL_KEY = "front_door_model"
"""The key of ``scope["state"]`` where a route puts the name of the model it served (a name
of the scheduler's models, never a client's text)."""


@attrs.define(eq=False)
class FrontDoorMetrics:
    """The front door's request metrics (module docstring); make one with `create`."""

    requests: Counter
    duration: Histogram
    first_byte: Histogram
    in_flight: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> FrontDoorMetrics:
        """The families, on ``registry`` (a fresh one when None)."""
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        return cls(
            Counter(
                "inferactors_front_door_requests",
                "Front door requests answered",
                ("model", "dialect", "code"),
                registry=reg,
            ),
            Histogram(
                "inferactors_front_door_request_duration_seconds",
                "Arrival to last byte or disconnect",
                ("model",),
                buckets=LATENCY_BUCKETS,
                registry=reg,
            ),
            Histogram(
                "inferactors_front_door_first_byte_seconds",
                "Arrival to the first byte of the body",
                ("model",),
                buckets=LATENCY_BUCKETS,
                registry=reg,
            ),
            Gauge(
                "inferactors_front_door_requests_in_flight",
                "Front door requests being answered",
                registry=reg,
            ),
        )


class Measured:
    """ASGI middleware: every HTTP request counted and timed in `FrontDoorMetrics`; the
    dialect is told by ``dialect_of(path)``."""

    def __init__(
        self, app: ASGIApp, metrics: FrontDoorMetrics, dialect_of: Callable[[str], Dialect]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.dialect_of = dialect_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = trio.current_time()
        status = [0]
        first: list[float] = []

        async def measured(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            elif message["type"] == "http.response.body" and message.get("body") and not first:
                first.append(trio.current_time())
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, measured)
        finally:
            self.metrics.in_flight.dec()
            model = str(scope.get("state", {}).get(MODEL_KEY, ""))
            dialect = self.dialect_of(scope["path"]).value
            self.metrics.requests.labels(model, dialect, str(status[0])).inc()
            self.metrics.duration.labels(model).observe(trio.current_time() - arrived)
            if first:
                self.metrics.first_byte.labels(model).observe(first[0] - arrived)
