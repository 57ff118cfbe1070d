"""Tests of the Ollama API client against the fake Ollama (seed-behaviour.md section 5,
checklist 70; FC-18 to FC-21): `OllamaClient` through `FakeOllama.transport` under
MockClock, so loads of minutes and lingering unloads take no real time, and twice over a
real loopback socket. It only ever sends the allowed requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import attrs
import httpx
import pytest
import trio
import trio.testing

from inferactors._edges.ollama_client import OllamaApi, OllamaClient
from inferactors._errors import BackendError
from inferactors._policy.ollama_parse import ExpiryWatch, OllamaLoadTimeout, OllamaModel
from inferactors.testing._fake_ollama import FakeOllama, FakeRequest, open_fake_ollama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig

RUNNER_TIMEOUT = "timed out waiting for llama runner to start - progress 0.00 - "
ALLOWED = {
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("GET", "/api/ps"),
    ("POST", "/api/generate"),
    ("POST", "/v1/chat/completions"),
}


@pytest.fixture
async def fake(autojump_clock: trio.testing.MockClock) -> FakeOllama:
    """A fake with ``tiny`` pulled and ``other:7b`` loaded by someone else.

    Tests using it name ``autojump_clock`` too: pytest-trio takes the clock only from a
    test's own arguments.
    """
    return FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("other:7b",)))


@pytest.fixture
async def client(fake: FakeOllama) -> AsyncIterator[OllamaClient]:
    async with OllamaClient.open(
        "http://ollama.test", timeout_s=5.0, transport=fake.transport()
    ) as opened:
        yield opened


def paths(fake: FakeOllama) -> list[tuple[str, str]]:
    return [(request.method, request.path) for request in fake.requests]


async def test_version_tags_ps_and_resident(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    assert await client.version() == "0.5.1"
    tags = await client.tags()
    assert [(m.name, m.format) for m in tags] == [("tiny:latest", "gguf"), ("other:7b", "gguf")]
    assert tags[0] == OllamaModel(
        "tiny:latest", "tiny:latest", fake.book.pulled["tiny:latest"].digest, tags[0].size, "gguf"
    )
    (other,) = await client.ps()
    assert (other.name, other.digest) == ("other:7b", fake.book.pulled["other:7b"].digest)
    assert isinstance(other.expires_at, datetime)
    assert other.size_vram is not None
    assert await client.resident("other:7b") == other
    assert await client.resident("tiny") is None
    assert await client.resident("other") is None  # other:latest is not other:7b


async def test_a_numeric_keep_alive_string_is_sent_as_a_number(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    await client.load("tiny", "-1")
    assert fake.requests[-1] == FakeRequest(
        "POST", "/api/generate", {"model": "tiny", "prompt": "", "stream": False, "keep_alive": -1}
    )
    resident = await client.resident("tiny:latest")
    assert resident is not None
    assert isinstance(resident.expires_at, datetime)
    assert resident.expires_at.year > 2300  # forever: Ollama accepted the number


async def test_a_duration_keep_alive_is_sent_as_a_string(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    start = trio.current_time()
    await client.load("tiny", "30m")
    body = fake.requests[-1].json
    assert isinstance(body, dict)
    assert body["keep_alive"] == "30m"
    resident = await client.resident("tiny")
    assert resident is not None
    assert resident.expires_at == fake.wall(start + 1800)


async def test_a_load_may_take_longer_than_the_request_timeout(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    """FC-18: the load request stays open for the whole load (10 minutes > timeout_s 5 s)."""
    fake.config = attrs.evolve(fake.config, load_delay_s=600.0)
    start = trio.current_time()
    await client.load("tiny", -1)
    assert trio.current_time() - start == pytest.approx(600.0)
    assert await client.resident("tiny") is not None


async def test_a_load_past_its_budget_is_a_load_timeout_and_leaves_nothing(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    fake.config = attrs.evolve(fake.config, load_delay_s=600.0)
    async with OllamaClient.open(
        "http://ollama.test", timeout_s=5.0, load_timeout_s=60.0, transport=fake.transport()
    ) as client:
        with pytest.raises(OllamaLoadTimeout, match="did not finish within 60 s"):
            await client.load("tiny", -1)
        assert await client.resident("tiny") is None  # the abandoned load was aborted


async def test_a_runner_timeout_is_a_load_timeout_not_a_dead_daemon(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    """FC-19."""
    fake.config = attrs.evolve(fake.config, load_delay_s=300.0, load_error=RUNNER_TIMEOUT)
    with pytest.raises(OllamaLoadTimeout) as caught:
        await client.load("tiny", -1)
    assert str(caught.value).startswith("ollama load returned HTTP 500: {")
    assert RUNNER_TIMEOUT in str(caught.value)
    assert isinstance(caught.value, TimeoutError)
    assert await client.version() == "0.5.1"  # the daemon is fine


async def test_other_load_failures_are_backend_errors(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    with pytest.raises(BackendError) as missing:
        await client.load("nope", "30m")
    assert not isinstance(missing.value, OllamaLoadTimeout)
    assert (
        str(missing.value) == 'ollama load returned HTTP 404: {"error": "model \'nope\' not found"}'
    )


async def test_unload_then_wait_gone_through_lingering(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    """FC-21: the unload answers at once; the model stays in /api/ps for 3 s."""
    fake.config = attrs.evolve(fake.config, unload_linger_s=3.0)
    await client.load("tiny", -1)
    await client.unload("tiny")
    assert fake.requests[-1].json == {"model": "tiny", "keep_alive": 0}
    assert await client.resident("tiny") is not None
    assert await client.wait_gone("tiny", deadline_s=1.0) is False
    start = trio.current_time()
    assert await client.wait_gone("tiny", deadline_s=10.0, interval_s=0.25) is True
    assert 1.75 <= trio.current_time() - start <= 2.25  # 3 s linger, 1 s already waited
    assert "other:7b" in fake.resident()  # never touched


async def test_tiny_completion_asks_by_tag_without_keep_alive(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    await client.load("tiny", -1)
    result = await client.tiny_completion("tiny")
    assert (result.text, result.finish_reason) == ("Hello", "length")
    request = fake.requests[-1]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert isinstance(request.json, dict)
    assert request.json["model"] == "tiny"
    assert request.json["max_tokens"] == 1
    assert "keep_alive" not in request.json
    resident = await client.resident("tiny")
    assert resident is not None
    assert isinstance(resident.expires_at, datetime)
    assert resident.expires_at.year > 2300  # still forever


async def test_a_foreign_keep_alive_is_noticed_as_ownership_lost(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    """FC-20: we pin with -1; our own deep health keeps the pin; a foreign "5m" breaks it."""
    await client.load("tiny", -1)
    baseline = await client.resident("tiny")
    assert baseline is not None
    watch, start = ExpiryWatch.after_load(baseline), trio.current_time()
    await trio.sleep(30)
    await client.tiny_completion("tiny")  # restarts the idle timer: expiry moves 30 s on
    moved = await client.resident("tiny")
    assert moved is not None
    assert moved.expires_at != baseline.expires_at
    watch, verdict = watch.observe(moved, trio.current_time() - start)
    assert verdict == "kept"
    await trio.sleep(30)
    async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as foreign:
        body = {"model": "tiny", "prompt": "hi", "stream": False, "keep_alive": "5m"}
        assert (await foreign.post("/api/generate", json=body)).status_code == 200
    _, verdict = watch.observe(await client.resident("tiny"), trio.current_time() - start)
    assert verdict == "changed"


async def test_every_method_uses_only_the_allowed_requests(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, client: OllamaClient
) -> None:
    """Checklist 70: never /api/pull, /api/delete or an HTTP DELETE. Also the exact sequence."""
    api: OllamaApi = client
    await api.version()
    await api.tags()
    await api.ps()
    await api.resident("tiny")
    await api.load("tiny", "30m")
    await api.tiny_completion("tiny")
    await api.unload("tiny")
    assert await api.wait_gone("tiny", deadline_s=5.0)
    assert set(paths(fake)) <= ALLOWED
    assert paths(fake) == [
        ("GET", "/api/version"),
        ("GET", "/api/tags"),
        ("GET", "/api/ps"),
        ("GET", "/api/ps"),
        ("POST", "/api/generate"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/api/generate"),
        ("GET", "/api/ps"),
    ]


# --- over a real socket ----------------------------------------------------------------------


async def test_the_client_over_real_http() -> None:
    async with (
        open_fake_ollama(models=("tiny",), unload_linger_s=0.3) as fake,
        OllamaClient.open(fake.base_url, timeout_s=30.0) as client,
    ):
        assert await client.version() == "0.5.1"
        await client.load("tiny", "-1")
        assert await client.resident("tiny") is not None
        assert (await client.tiny_completion("tiny")).text == "Hello"
        await client.unload("tiny")
        assert await client.wait_gone("tiny", deadline_s=30.0, interval_s=0.05)
    assert set(paths(fake)) <= ALLOWED


async def test_a_load_cut_short_over_real_http_is_aborted_by_the_daemon() -> None:
    """FC-18 end to end: our load timeout closes the connection; the fake aborts the load."""
    async with (
        open_fake_ollama(models=("tiny",), load_delay_s=60.0) as fake,
        OllamaClient.open(fake.base_url, timeout_s=30.0, load_timeout_s=0.5) as client,
    ):
        with pytest.raises(OllamaLoadTimeout):
            await client.load("tiny", -1)
        assert await client.wait_gone("tiny", deadline_s=20.0, interval_s=0.05)
