"""`FleetMetrics` (issue 10 item 5): a scrape, parsed by prometheus-client's own parser,
after a real (fake) llama-server ran, answered a deep health, crashed and was restarted;
and the pure bookkeeping of each family, fed made-up events."""

from __future__ import annotations

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from inferactors import (
    BackendError,
    InstanceState,
    InstanceStatus,
    ProcessExited,
    StateChanged,
)
from inferactors._actors.serving import open_runtime
from inferactors._edges.bundle import Edges, ProbeTimed
from inferactors._events import ExposureDetected, ModelTampered, ProcessStarted, StopReason
from inferactors._service.metrics import FleetMetrics
from inferactors._service.views import InstanceView
from inferactors.testing import CrashAt, RuntimeKit, Timeline

FLAVOR = "infer.llamacpp"


def scrape(metrics: FleetMetrics, views: list[InstanceView]) -> dict[str, list[Sample]]:
    text = metrics.render(views).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def view(iid: str, state: InstanceState = InstanceState.RUNNING) -> InstanceView:
    return InstanceView("chat", FLAVOR, "managed", iid, InstanceStatus(state))


async def test_a_scrape_after_a_crash_and_restart_parses_with_the_expected_families(
    inferactors_kit: RuntimeKit,
) -> None:
    metrics = FleetMetrics.create("9.9.9")
    # It dies on its second completion (the first is its start's first token): the deep
    # health below, so the crash comes after Running however loaded the machine is.
    config = inferactors_kit.config(Timeline.of(CrashAt(request=2)))
    edges = Edges(on_probe=metrics.on_probe)
    async with open_runtime(config, node_id="test", edges=edges) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(inferactors_kit.spec())
        metrics.track([view(handle.instance_id)])
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        with pytest.raises(BackendError):
            await runtime.deep_health(handle)
        with trio.fail_after(30):
            async for event in events:
                metrics.observe(event)
                running = isinstance(event, StateChanged) and event.new is InstanceState.RUNNING
                if running and crashes(metrics) >= 1:  # Running again after the restart
                    break
        families = scrape(metrics, [view(handle.instance_id)])
    chat = {"instance": "chat", "flavor": FLAVOR, "mode": "managed"}
    assert value(families["inferactors_instance_state"], "inferactors_instance_state",
                 state="running", **chat) == 1  # fmt: skip
    assert value(families["inferactors_instance_state"], "inferactors_instance_state",
                 state="exited", **chat) == 0  # fmt: skip
    exits = families["inferactors_process_exits"]
    assert value(exits, "inferactors_process_exits_total", reason="crash", **chat) == 1
    assert value(families["inferactors_restarts"], "inferactors_restarts_total", **chat) == 1
    probes = families["inferactors_probe_duration_seconds"]
    assert value(probes, "inferactors_probe_duration_seconds_count", **chat) >= 2
    deep = families["inferactors_deep_health_duration_seconds"]
    assert value(deep, "inferactors_deep_health_duration_seconds_count", **chat) >= 1
    ttft = value(families["inferactors_time_to_first_token_seconds"],
                 "inferactors_time_to_first_token_seconds", **chat)  # fmt: skip
    ready = value(families["inferactors_time_to_ready_seconds"],
                  "inferactors_time_to_ready_seconds", **chat)  # fmt: skip
    assert 0 < ttft < 10
    assert 0 < ready < 30
    assert value(families["inferactors_up"], "inferactors_up") == 1
    assert value(families["inferactors_instances"], "inferactors_instances") == 1
    assert value(families["inferactors_build_info"], "inferactors_build_info", version="9.9.9") == 1


def crashes(metrics: FleetMetrics) -> float:
    labels = {"instance": "chat", "flavor": FLAVOR, "mode": "managed", "reason": "crash"}
    return metrics.registry.get_sample_value("inferactors_process_exits_total", labels) or 0.0


def test_exposure_and_tamper_events_are_counted_and_unknown_ids_ignored() -> None:
    metrics = FleetMetrics.create("1")
    metrics.observe(ExposureDetected("chat-1", "0.0.0.0:8080", 1.0), [view("chat-1")])
    metrics.observe(ExposureDetected("chat-1", "0.0.0.0:8080", 2.0))
    metrics.observe(ModelTampered("chat-1", "tiny", "tiny.gguf", "size changed", 3.0))
    metrics.observe(ModelTampered("other-2", "tiny", "tiny.gguf", "size changed", 3.0))
    metrics.on_probe(ProbeTimed("other-2", 0.002, 3.0))
    metrics.observe(ProcessStarted("chat-1", 10, (), 5.0))
    metrics.observe(StateChanged("chat-1", InstanceState.LOADED, InstanceState.RUNNING, None, 7.5))
    exit_ = ProcessExited("chat-1", 10, None, 15, StopReason.EXPOSURE, 8.0)
    metrics.observe(exit_)
    families = scrape(metrics, [view("chat-1", InstanceState.EXITED)])
    chat = {"instance": "chat", "flavor": FLAVOR, "mode": "managed"}
    assert value(families["inferactors_exposure_events"], "inferactors_exposure_events_total",
                 **chat) == 2  # fmt: skip
    tamper = families["inferactors_tamper_events"]
    assert [s.value for s in tamper if s.name.endswith("_total")] == [1]  # other-2 untracked
    assert value(families["inferactors_time_to_ready_seconds"],
                 "inferactors_time_to_ready_seconds", **chat) == 2.5  # fmt: skip
    exits = families["inferactors_process_exits"]
    assert value(exits, "inferactors_process_exits_total", reason="exposure", **chat) == 1
    states = families["inferactors_instance_state"]
    assert {s.labels["state"]: s.value for s in states} == {
        "loaded": 0, "running": 0, "degraded": 0, "exited": 1, "unknown": 0,
    }  # fmt: skip
    assert not [s for s in families["inferactors_probe_duration_seconds"] if s.value]
