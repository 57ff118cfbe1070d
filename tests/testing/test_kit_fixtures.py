"""The pytest plugin's fixtures (issue 12, items 1 and 4), used here as a downstream suite
uses them: each fake is a real process on a free loopback port playing the test's
``inferactors_faults`` marker, reached over plain HTTP (httpx, the official ollama client),
and the managed runtime restarts a fake server that crashes."""

from __future__ import annotations

import time

import httpx
import ollama
import pytest
import trio

from inferactors import InferRuntime, InstanceState, InvalidConfig, ProcessExited, ProcessStarted
from inferactors.testing import (
    CrashAt,
    DeadGenerator,
    FakeOllamaServer,
    FakeServer,
    ForeignKeepAlive,
    Hang,
    ImpostorOnPort,
    LoadTimeout,
    RuntimeKit,
    SlowFirstToken,
    Status503,
    Timeline,
)
from inferactors.testing.pytest_plugin import Fakes

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def client() -> httpx.Client:
    return httpx.Client(trust_env=False, timeout=10.0)


@pytest.mark.inferactors_faults(Status503(for_s=0.5), CrashAt(request=2))
def test_a_fake_llama_server_plays_503_then_ok_then_a_crash(fake_llama_server: FakeServer) -> None:
    with client() as http:
        assert http.get(fake_llama_server.base_url + "/health").status_code == 503
        time.sleep(0.6)
        assert http.get(fake_llama_server.base_url + "/health").status_code == 200
        reply = http.post(fake_llama_server.base_url + "/v1/chat/completions", json=CHAT)
        assert reply.json()["choices"][0]["finish_reason"] == "length"
        with pytest.raises(httpx.RemoteProtocolError):
            http.post(fake_llama_server.base_url + "/v1/chat/completions", json=CHAT)
    fake_llama_server.process.wait(timeout=10)
    assert fake_llama_server.returncode() == -9  # SIGKILL, as the OOM killer does
    assert [r.path for r in fake_llama_server.requests()].count("/v1/chat/completions") == 2


@pytest.mark.inferactors_faults(SlowFirstToken(delay_s=0.4), ImpostorOnPort(model="x.gguf"))
def test_a_slow_first_token_and_an_impostor(fake_llama_server: FakeServer) -> None:
    with client() as http:
        models = http.get(fake_llama_server.base_url + "/v1/models").json()
        assert models["data"][0]["id"] == "x.gguf"
        started = time.monotonic()
        http.post(fake_llama_server.base_url + "/v1/chat/completions", json=CHAT)
        assert time.monotonic() - started >= 0.4


@pytest.mark.inferactors_faults("FC-07")
def test_a_field_case_by_name_on_the_fake_mlx_server(fake_mlx_server: FakeServer) -> None:
    with client() as http:
        assert http.get(fake_mlx_server.base_url + "/health").status_code == 503
        reply = http.post(fake_mlx_server.base_url + "/v1/chat/completions", json=CHAT)
        assert (reply.status_code, reply.json()) == (404, {"error": "generation thread died"})


def test_restart_plays_another_timeline_on_the_same_port(fake_llama_server: FakeServer) -> None:
    port, first_pid = fake_llama_server.port, fake_llama_server.pid
    fake_llama_server.restart(Timeline.of(Hang()))
    assert (fake_llama_server.port, fake_llama_server.pid != first_pid) == (port, True)
    with client() as http, pytest.raises(httpx.ReadTimeout):
        http.post(fake_llama_server.base_url + "/v1/completions", json=CHAT, timeout=0.5)


@pytest.mark.inferactors_faults("FC-19")
def test_the_official_ollama_client_sees_the_load_timeout(fake_ollama: FakeOllamaServer) -> None:
    with ollama.Client(host=fake_ollama.base_url) as api:
        assert [m.model for m in api.list().models] == ["tiny:latest"]
        with pytest.raises(ollama.ResponseError) as refused:
            api.generate(model="tiny", prompt="hi")
        assert refused.value.status_code == 500
        assert "timed out waiting for llama runner to start" in refused.value.error
        assert api.ps().models == []


@pytest.mark.inferactors_faults(ForeignKeepAlive(model="tiny", keep_alive="5m", after_s=0.3))
def test_a_foreign_keep_alive_replaces_ours(fake_ollama: FakeOllamaServer) -> None:
    with ollama.Client(host=fake_ollama.base_url) as api:
        api.generate(model="tiny", keep_alive=-1)
        forever = api.ps().models[0].expires_at
        assert forever is not None
        deadline = time.monotonic() + 10
        while (expiry := api.ps().models[0].expires_at) == forever:
            assert time.monotonic() < deadline, "the foreign client never came"
            time.sleep(0.05)
        assert expiry is not None
        assert expiry < forever


def test_fakes_of_each_kind_start_side_by_side(inferactors_fakes: Fakes) -> None:
    started: list[FakeServer | FakeOllamaServer] = [
        inferactors_fakes.llama(),
        inferactors_fakes.mlx(),
    ]
    started.append(inferactors_fakes.ollama())
    assert len({fake.port for fake in started}) == 3
    inferactors_fakes.stop_all()
    assert all(fake.process.poll() is not None for fake in started)


@pytest.mark.inferactors_faults(CrashAt(after_s=1.0, exit_code=3))
async def test_the_runtime_fixture_restarts_a_crashing_fake(
    inferactors_runtime: InferRuntime, inferactors_kit: RuntimeKit
) -> None:
    events = await inferactors_runtime.subscribe(buffer=100)
    handle = await inferactors_runtime.load(inferactors_kit.spec())
    await inferactors_runtime.start(handle)
    with trio.fail_after(30):
        await inferactors_runtime.wait_state(handle, InstanceState.RUNNING)
        kinds: list[object] = []
        while kinds.count(ProcessStarted) < 2:
            kinds.append(type(event := await events.receive()))
            if isinstance(event, ProcessExited):
                assert event.exit_code == 3
    assert ProcessExited in kinds


@pytest.mark.inferactors_faults(LoadTimeout(), Status503(for_s=30.0))
def test_a_mixed_marker_plays_each_step_on_its_fake(
    fake_llama_server: FakeServer, fake_ollama: FakeOllamaServer
) -> None:
    with client() as http:
        assert http.get(fake_llama_server.base_url + "/health").status_code == 503
    with ollama.Client(host=fake_ollama.base_url) as api, pytest.raises(ollama.ResponseError):
        api.generate(model="tiny", prompt="hi")


def test_a_restart_the_fake_cannot_play_leaves_it_serving(
    fake_llama_server: FakeServer, fake_ollama: FakeOllamaServer
) -> None:
    pids = (fake_llama_server.pid, fake_ollama.pid)
    with pytest.raises(InvalidConfig, match="DeadGenerator"):
        fake_llama_server.restart(Timeline.of(DeadGenerator()))
    with pytest.raises(InvalidConfig, match="Hang is a llama-server"):
        fake_ollama.restart(Timeline.of(Hang()))
    assert (fake_llama_server.pid, fake_ollama.pid) == pids
    assert fake_llama_server.returncode() is None
    assert fake_ollama.process.poll() is None
    with client() as http:
        assert http.get(fake_llama_server.base_url + "/health").status_code == 200
        assert http.get(fake_ollama.base_url + "/api/tags").status_code == 200


def test_a_foreign_keep_alive_needs_a_pulled_model_and_a_valid_duration(
    fake_ollama: FakeOllamaServer,
) -> None:
    with pytest.raises(InvalidConfig, match="model 'nope:latest' is not pulled"):
        fake_ollama.foreign_keep_alive("nope:latest", "5m")
    with pytest.raises(InvalidConfig, match="keep_alive"):
        fake_ollama.foreign_keep_alive("tiny", "forever")
    fake_ollama.foreign_keep_alive("tiny", "3600")  # whole seconds, sent as a number
    with ollama.Client(host=fake_ollama.base_url) as api:
        (model,) = api.ps().models
    assert model.expires_at is not None
    left_s = (model.expires_at - model.expires_at.now(model.expires_at.tzinfo)).total_seconds()
    assert 3500 < left_s <= 3600
