"""What the servers themselves report and cost, as metrics: `EngineFigures`, a
prometheus-client collector on the fleet's registry.

Fed at each scrape of the supervisor's ``/metrics`` (`Fleet.refresh_metrics`), before it
renders:

- each llama.cpp server's own metrics (``llama-server --metrics``: ``llamacpp:*``), when
  it offers them, re-exported with the labels ``instance`` (its name in the run file),
  ``flavor`` and ``mode`` added (a label of the server's own by one of those names is kept
  as ``exported_<name>``); families of one name from several servers are one family; a
  counter whose name does not end in ``_total`` (llama.cpp's ``n_tokens_max``) comes as
  ``unknown`` (untyped) under its own name (`engine_metrics.parse_metrics`);
- ``inferactors_engine_scrape_failed``: 1 when a server that offers metrics could not be
  scraped (late, refused, not the text format), 0 when it was;
- ``inferactors_server_resident_memory_bytes`` and ``inferactors_server_cpu_seconds_total``
  of each managed server's process tree (psutil; CPU of the processes alive now).

An instance that has no server up, or is gone from the run file, has none of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import attrs
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .._edges.engine_metrics import EngineScrape
from .._edges.tree_usage import TreeUsage

LABELS = ("instance", "flavor", "mode")


@attrs.define(eq=False)
class EngineFigures:
    """The last scrape of each server and the last reading of each process tree, by
    instance name, with the instance's (name, flavor, mode) labels."""

    scrapes: dict[str, tuple[tuple[str, str, str], EngineScrape]] = attrs.Factory(dict)
    usage: dict[str, tuple[tuple[str, str, str], TreeUsage]] = attrs.Factory(dict)

    def update(
        self,
        scrapes: Mapping[tuple[str, str, str], EngineScrape],
        usage: Mapping[tuple[str, str, str], TreeUsage],
    ) -> None:
        """Replace every figure with these (instances not named have none any more)."""
        self.scrapes = {labels[0]: (labels, scrape) for labels, scrape in scrapes.items()}
        self.usage = {labels[0]: (labels, used) for labels, used in usage.items()}

    def collect(self) -> Iterator[Metric]:
        """The families, for prometheus-client's exposition."""
        yield from _engine_families(self.scrapes.values())
        failed = GaugeMetricFamily(
            "inferactors_engine_scrape_failed",
            "1 when the server's own /metrics could not be scraped, 0 when it was",
            labels=LABELS,
        )
        for labels, scrape in self.scrapes.values():
            if scrape.offered:
                failed.add_metric(labels, 1.0 if scrape.error is not None else 0.0)
        yield failed
        rss = GaugeMetricFamily(
            "inferactors_server_resident_memory_bytes",
            "Resident memory of the server's process tree",
            labels=LABELS,
        )
        cpu = CounterMetricFamily(
            "inferactors_server_cpu_seconds",
            "CPU time (user and system) of the server's live process tree",
            labels=LABELS,
        )
        for labels, used in self.usage.values():
            rss.add_metric(labels, float(used.rss_bytes))
            cpu.add_metric(labels, used.cpu_s)
        yield rss
        yield cpu


def _engine_families(
    scrapes: Iterable[tuple[tuple[str, str, str], EngineScrape]],
) -> Iterator[Metric]:
    merged: dict[str, Metric] = {}
    for labels, scrape in scrapes:
        ours = dict(zip(LABELS, labels, strict=True))
        for family in scrape.families:
            kind = family.type
            out = merged.setdefault(family.name, Metric(family.name, family.documentation, kind))
            if out.type != kind:
                continue  # two servers disagree on a family's type: the first one's stands
            for sample in family.samples:
                theirs = {
                    (f"exported_{key}" if key in ours else key): value
                    for key, value in sample.labels.items()
                }
                out.add_sample(sample.name, {**theirs, **ours}, sample.value, sample.timestamp)
    yield from merged.values()
