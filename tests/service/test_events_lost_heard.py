"""An `EventsLost` marker (a subscriber fell behind) reaches the fleet like any event: its
metrics skip it (it is no instance's), the CLI says it in words, at WARNING."""

from __future__ import annotations

import logging

from prometheus_client.parser import text_string_to_metric_families

from inferactors import EventsLost
from inferactors._cli.event_words import describe_event
from inferactors._cli.logging_setup import event_level
from inferactors._events import instance_of
from inferactors._service.metrics import FleetMetrics


def test_the_metrics_skip_a_marker_and_still_render() -> None:
    metrics = FleetMetrics.create("9.9.9")
    metrics.observe(EventsLost(count=7, at=1.0))
    families = {f.name for f in text_string_to_metric_families(metrics.render([]).decode())}
    assert families  # rendered as before


def test_the_cli_says_how_many_were_lost_as_a_warning() -> None:
    marker = EventsLost(count=7, at=1.0)
    assert instance_of(marker) is None
    assert "LOST 7 event(s)" in describe_event(marker)
    assert event_level(marker) == logging.WARNING
