"""An `EventsLost` marker (a subscriber fell behind) reaches the fleet like any event: its
metrics skip it (it is no instance's), the CLI says it in words, at WARNING."""

from __future__ import annotations

import logging

from prometheus_client.parser import text_string_to_metric_families

from inferactors import EventsLost
from inferactors._cli.event_words import describe_event
from inferactors._cli.logging_setup import event_level
from inferactors._events import RestartScheduled, instance_of
from inferactors._service.metrics import FleetMetrics
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState, InstanceStatus

CHAT = InstanceView(
    "chat", "infer.llamacpp", "managed", "chat-1", InstanceStatus(InstanceState.RUNNING)
)


def _samples(metrics: FleetMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render([CHAT]).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_metrics_skip_a_marker_and_still_render() -> None:
    metrics = FleetMetrics.create("9.9.9")
    before = _samples(metrics)
    metrics.observe(EventsLost(count=7, at=1.0))
    after = _samples(metrics)
    assert after == before  # no counter moved, no series was added
    assert all(dict(labels).get("instance") != "" for _, labels in after)
    metrics.observe(RestartScheduled("chat-1", 1, 0.5, 2.0))  # an instance's event does
    moved = {key for key, value in _samples(metrics).items() if before.get(key) != value}
    assert {name for name, _ in moved} == {"inferactors_restarts_total"}


def test_the_cli_says_how_many_were_lost_as_a_warning() -> None:
    marker = EventsLost(count=7, at=1.0)
    assert instance_of(marker) is None
    assert "LOST 7 event(s)" in describe_event(marker)
    assert event_level(marker) == logging.WARNING
