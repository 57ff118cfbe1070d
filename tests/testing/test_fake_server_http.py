"""Tests of what the fake inference server answers over HTTP, run as a real process: the
llama-server flavor loading then serving (or loading forever, FC-06), completions that hang
or are refused (FC-04, FC-07, FC-09), mlx_lm.server's loading and dead generator, and the
request log. Loopback only.
"""

from __future__ import annotations

import time

import httpx
import pytest

from inferactors._policy.probe_parse import (
    classify_health,
    completion_body,
    parse_completion,
    parse_model_ids,
)
from inferactors._policy.probe_report import Loading, Unhealthy, Up
from inferactors.testing._fake_faults import FakeServerFaults, Flavor
from inferactors.testing._fake_server import read_request_log
from testing.fake_server_support import CHAT, LOADING_BODY, Fakes, eventually


def test_llamacpp_loads_then_serves_like_llama_server(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(load_s=0.4), alias="tiny-chat")
    health = fake.get("/health")
    assert (health.status_code, health.json()) == (503, LOADING_BODY)
    assert classify_health(health.status_code, health.content) == Loading()
    models = fake.get("/v1/models")  # answers while loading, with meta null (FC-03)
    assert models.status_code == 200
    assert [(m["id"], m["meta"]) for m in models.json()["data"]] == [("tiny-chat", None)]
    assert fake.get("/props").status_code == 503
    assert fake.post(CHAT, completion_body(None)).status_code == 503

    eventually(lambda: fake.get("/health").status_code == 200)
    first_200 = read_request_log(fake.dir / "requests.jsonl")[-1]
    assert first_200.path == "/health"
    assert first_200.at_s >= 0.399, "answered 200 before its load of 0.4 s was over"
    models = fake.get("/v1/models")
    assert parse_model_ids(models.content) == ("tiny-chat",)
    assert models.json()["data"][0]["meta"]["n_vocab"] == 420
    props = fake.get("/props").json()
    assert (props["model_path"], props["model_alias"], props["build_info"]) == (
        "tiny.gguf",
        "tiny-chat",
        "b0-fake",
    )
    chat = fake.post(CHAT, completion_body(None))
    assert parse_completion(chat.status_code, chat.content) == (" and", "length")
    native = fake.post("/completion", {"prompt": "Hi", "n_predict": 1}).json()
    assert (native["content"], native["stop_type"]) == (" and", "limit")
    assert fake.get("/slots/nothing").status_code == 404
    assert f"listening on {fake.url} pid {fake.pid}" in fake.stdout()


def test_fc06_load_forever_answers_503_forever(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(load_forever=True))
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        assert fake.get("/health").status_code == 503
        time.sleep(0.05)
    assert fake.get("/v1/models").json()["data"][0]["meta"] is None


@pytest.mark.parametrize(
    ("flavor", "faults"),
    [
        ("llamacpp", FakeServerFaults(hang_completions=True)),  # FC-04
        ("mlx", FakeServerFaults(load_forever=True)),  # FC-07: health 200, generator never up
    ],
)
def test_fc04_fc07_health_fine_while_completions_hang(
    fakes: Fakes, free_port: int, flavor: Flavor, faults: FakeServerFaults
) -> None:
    fake = fakes.start(free_port, flavor=flavor, faults=faults)
    health = fake.get("/health")
    assert classify_health(health.status_code, health.content) == Up()
    with pytest.raises(httpx.ReadTimeout):
        fake.post(CHAT, completion_body(None), timeout_s=0.5)


def test_fail_completions_after_n_then_hang(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(fail_completions_after=2))
    for _ in range(2):
        assert fake.post(CHAT, completion_body(None)).status_code == 200
    with pytest.raises(httpx.ReadTimeout):
        fake.post(CHAT, completion_body(None), timeout_s=0.5)
    assert fake.get("/health").status_code == 200


def test_fc09_mlx_refuses_a_model_field_other_than_its_model(fakes: Fakes, free_port: int) -> None:
    model = "/models/tiny-mlx"
    fake = fakes.start(free_port, flavor="mlx", model=model)
    assert parse_model_ids(fake.get("/v1/models").content) == (model,)
    for body in (completion_body(None), completion_body(model)):
        reply = fake.post(CHAT, body)
        assert parse_completion(reply.status_code, reply.content) == (" and", "length")
    refused = fake.post(CHAT, completion_body("tiny-mlx"))
    assert refused.status_code == 404
    assert "tiny-mlx" in refused.json()["error"]
    assert (fake.get("/props").status_code, fake.get("/props").text) == (404, "Not Found")


def test_mlx_completion_during_the_load_waits_for_it(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, flavor="mlx", faults=FakeServerFaults(load_s=0.5))
    assert fake.get("/health").status_code == 200  # mlx_lm.server: 200 while loading
    sent = time.monotonic()
    reply = fake.post(CHAT, completion_body(None))
    took_s = time.monotonic() - sent
    assert reply.status_code == 200
    arrived_s = read_request_log(fake.dir / "requests.jsonl")[-1].at_s
    assert took_s >= 0.5 - arrived_s - 0.001


def test_fc07_mlx_dead_generator(fakes: Fakes, free_port: int) -> None:
    faults = FakeServerFaults(load_s=0.2, dead_generator=True)
    fake = fakes.start(free_port, flavor="mlx", faults=faults)
    eventually(lambda: fake.get("/health").status_code == 503)
    health = fake.get("/health")
    assert health.json() == {"status": "unavailable"}
    assert isinstance(classify_health(health.status_code, health.content), Unhealthy)
    assert fake.get("/v1/models").json() == {"object": "list", "data": []}
    dead = fake.post(CHAT, completion_body(None))
    assert (dead.status_code, dead.json()) == (404, {"error": "generation thread died"})
    assert fake.process.poll() is None  # the process stays alive, as mlx-lm 0.32.2 does


def test_request_log_has_one_line_per_request(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port)
    fake.get("/health")
    fake.post(CHAT, completion_body("m"))
    fake.get("/v1/models?limit=1")
    log = read_request_log(fake.dir / "requests.jsonl")
    assert [(r.method, r.path) for r in log] == [
        ("GET", "/health"),
        ("POST", CHAT),
        ("GET", "/v1/models?limit=1"),
    ]
    assert [r.json() for r in log] == [None, completion_body("m"), None]
    assert [r.at_s for r in log] == sorted(r.at_s for r in log)
