"""The servers' own metrics and costs in ``/metrics`` (issue 18 item 6): the real
llama-server started with ``--metrics`` has its ``llamacpp:*`` families re-exported with
the instance's labels, after a real completion counted tokens; its process tree's memory
and CPU are there; a server whose ``/metrics`` fails is said by the failed-scrape gauge;
one that offers none (the fake answers 501, as llama-server without ``--metrics``) has
neither."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from edges.hostile_server_support import Reply, hostile_server
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, running, until


async def samples(fleet: Fleet) -> dict[str, list[Sample]]:
    await fleet.refresh_metrics()
    text = fleet.metrics_text().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def one(found: dict[str, list[Sample]], family: str, sample: str, instance: str) -> Sample:
    [hit] = [s for s in found[family] if s.name == sample and s.labels["instance"] == instance]
    return hit


async def test_the_real_llama_servers_own_metrics_are_re_exported_per_instance(
    inferactors_kit: RuntimeKit, llama_server: Path
) -> None:
    run = RunFile.create(inferactors_kit)
    port = free_port()
    run.write(Entry("chat", port, serve=', extra_args = ["--metrics"]'), program=llama_server)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat"), within_s=60)
        async with httpx.AsyncClient() as client:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            reply = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            assert reply.status_code == 200
        found = await samples(fleet)
    tokens = one(found, "llamacpp:tokens_predicted", "llamacpp:tokens_predicted_total", "chat")
    assert tokens.labels == {"instance": "chat", "flavor": "infer.llamacpp", "mode": "managed"}
    assert tokens.value >= 1
    failed = one(
        found, "inferactors_engine_scrape_failed", "inferactors_engine_scrape_failed", "chat"
    )
    assert failed.value == 0
    rss = one(
        found,
        "inferactors_server_resident_memory_bytes",
        "inferactors_server_resident_memory_bytes",
        "chat",
    )
    assert rss.value > 1 << 20
    cpu = one(
        found, "inferactors_server_cpu_seconds", "inferactors_server_cpu_seconds_total", "chat"
    )
    assert cpu.value > 0
    assert not any(s.name.endswith("_created") for family in found.values() for s in family)


async def test_a_failed_scrape_is_said_and_no_metrics_offered_is_not_a_failure(
    inferactors_kit: RuntimeKit,
) -> None:
    broken = {
        "/health": Reply(body=b'{"status": "ok"}'),
        "/v1/models": Reply(body=b'{"object": "list", "data": [{"id": "tiny"}]}'),
        "/metrics": Reply(status=500, body=b"boom"),
    }
    async with hostile_server(broken) as server:
        run = RunFile.create(inferactors_kit)
        run.write(Entry("fake", free_port()), Entry("broken", server.port, mode="adopted"))
        async with open_fleet(run.config(), run.path) as fleet:
            await until(fleet, running("fake"))
            await until(fleet, lambda f: f.view("broken").status.state.value == "running")
            found = await samples(fleet)
    family = "inferactors_engine_scrape_failed"
    assert one(found, family, family, "broken").value == 1
    assert not [s for s in found[family] if s.labels["instance"] == "fake"]  # 501: none
    assert not [f for f in found if f.startswith("llamacpp:")]
    rss = "inferactors_server_resident_memory_bytes"
    assert [s.labels["instance"] for s in found[rss]] == ["fake"]  # adopted: not ours
