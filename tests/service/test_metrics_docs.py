"""``docs/metrics.md`` lists every metric the supervisor exports, and nothing else: its
tables are checked against a render of the registry with every family present (an
instance tracked, an engine scrape and a process tree's use fed)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from inferactors import InstanceState, InstanceStatus
from inferactors._edges.engine_metrics import EngineScrape
from inferactors._edges.tree_usage import TreeUsage
from inferactors._service.front_door_metrics import FrontDoorMetrics
from inferactors._service.metrics import FleetMetrics
from inferactors._service.views import InstanceView

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
LABELS = ("chat", "infer.llamacpp", "managed")


def documented() -> set[str]:
    rows = re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), flags=re.MULTILINE)
    return set(rows)


def exported() -> set[str]:
    metrics = FleetMetrics.create("1.0")
    FrontDoorMetrics.create(metrics.registry)  # as ``inferactors run`` adds them with a door
    engine = Metric("llamacpp:requests_processing", "Requests processing", "gauge")
    engine.add_sample("llamacpp:requests_processing", {}, 1.0)
    metrics.engines.update({LABELS: EngineScrape((engine,))}, {LABELS: TreeUsage(1 << 20, 1.5)})
    view = InstanceView("chat", *LABELS[1:], "chat-1", InstanceStatus(InstanceState.RUNNING))
    text = metrics.render([view]).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        assert not any(sample.name.endswith("_created") for sample in family.samples)
        suffix = "_total" if family.type == "counter" else ""
        names.add(family.name + suffix)
    for line in text.splitlines():  # families with no sample yet still say their TYPE
        if line.startswith("# TYPE "):
            name = line.split()[2]
            names.add(name)
    return {"llamacpp:*" if name.startswith("llamacpp:") else name for name in names}


def test_every_exported_metric_is_documented_and_nothing_else() -> None:
    assert exported() == documented()
