"""The front door's request metrics: counted by the model's own name (never a client's
unknown text), the dialect and the status; timed to the first byte and to the end."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from inferactors._actors.front_door_resident import ResidentScheduler
from inferactors._config.front_door import FrontDoorConfig
from inferactors._service.front_door_metrics import FrontDoorMetrics
from inferactors._service.front_door_server import open_front_door
from service.front_door_support import entry_for, fake


async def test_requests_are_counted_and_timed_by_model_dialect_and_status(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    metrics = FrontDoorMetrics.create(registry)
    with fake(tmp_path) as server:
        scheduler = ResidentScheduler([entry_for("m", server, aliases=("alias",))])
        async with (
            open_front_door(scheduler, FrontDoorConfig(port=0), metrics=metrics) as door,
            httpx.AsyncClient(base_url=door.url) as client,
        ):
            chat = {"messages": [{"role": "user", "content": "x"}]}
            assert (
                await client.post("/v1/chat/completions", json={"model": "alias", **chat})
            ).status_code == 200
            streamed = {"model": "m", "stream": True, **chat}
            assert (await client.post("/v1/chat/completions", json=streamed)).status_code == 200
            assert (await client.post("/api/chat", json={"model": "m", **chat})).status_code == 200
            assert (await client.post("/api/chat", json={"model": "evil-" * 50})).status_code == 404
            assert (await client.get("/v1/models")).status_code == 200

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert (
        value("inferactors_front_door_requests_total", model="m", dialect="openai", code="200") == 2
    )
    assert (
        value("inferactors_front_door_requests_total", model="m", dialect="ollama", code="200") == 1
    )
    assert (
        value("inferactors_front_door_requests_total", model="", dialect="ollama", code="404") == 1
    )
    assert (
        value("inferactors_front_door_requests_total", model="", dialect="openai", code="200") == 1
    )
    assert value("inferactors_front_door_request_duration_seconds_count", model="m") == 3
    assert value("inferactors_front_door_first_byte_seconds_count", model="m") == 3
    first = value("inferactors_front_door_first_byte_seconds_sum", model="m")
    total = value("inferactors_front_door_request_duration_seconds_sum", model="m")
    assert first is not None
    assert total is not None
    assert 0 < first <= total
    assert value("inferactors_front_door_requests_in_flight") == 0
    labels = {s.labels.get("model") for m in registry.collect() for s in m.samples}
    assert labels <= {"m", "", None}  # the unknown name never became a label
