"""The Ollama API client (seed-behaviour.md section 5, checklist 66 and 70; FC-18 to FC-21).

Most tests drive `OllamaClient` against the fake Ollama through `FakeOllama.transport` under
MockClock, so loads of minutes and lingering unloads take no real time; one goes over a real
loopback socket. Error paths use ``httpx.MockTransport`` with fixed replies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime, timedelta

import attrs
import httpx
import pytest
import trio
import trio.testing

from inferactors._edges.ollama_client import OllamaApi, OllamaClient
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeFailure
from inferactors._errors import BackendError, DeepHealthTimeout, InvalidConfig
from inferactors._policy.ollama_parse import (
    ExpiryWatch,
    LoadedModel,
    OllamaLoadTimeout,
    OllamaModel,
    check_load_reply,
    keep_alive_json,
    load_body,
    parse_expiry,
    parse_ps,
    same_tag,
)
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
T0 = datetime(2030, 1, 1, tzinfo=UTC)

# --- pure helpers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        (-1, -1),
        (3600, 3600),
        ("-1", -1),
        ("+60", 60),
        ("0", 0),
        ("30m", "30m"),
        ("-1m", "-1m"),
        (" 5", " 5"),  # not an integer to a strict parser: sent as written
        ("1_000", "1_000"),
        (str(2**63), str(2**63)),  # beyond 64 bits: not a number
    ],
)
def test_keep_alive_is_a_number_when_it_parses_as_one(value: str | int, sent: int | str) -> None:
    assert keep_alive_json(value) == sent
    assert type(keep_alive_json(value)) is type(sent)


def test_keep_alive_refuses_a_bool() -> None:
    with pytest.raises(InvalidConfig):
        keep_alive_json(True)


def test_the_load_body_is_the_documented_one() -> None:
    assert load_body("qwen3:0.6b", "-1") == {
        "model": "qwen3:0.6b",
        "prompt": "",
        "stream": False,
        "keep_alive": -1,
    }


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("tiny", "tiny:latest", True),
        ("tiny:latest", "tiny", True),
        ("tiny", "tiny", True),
        ("qwen2.5:0.5b", "qwen2.5:0.5b", True),
        ("qwen2.5", "qwen2.5:0.5b", False),
        ("qwen", "qwen2.5:latest", False),
        ("tiny:q4", "tiny:latest", False),
        ("localhost:5000/tiny", "localhost:5000/tiny:latest", True),
    ],
)
def test_same_tag_reads_a_missing_tag_as_latest(a: str, b: str, same: bool) -> None:
    assert same_tag(a, b) is same


def test_expiry_parses_gos_rfc3339_and_keeps_anything_else_raw() -> None:
    assert parse_expiry("2024-06-04T14:38:31.837530123-07:00") == datetime(
        2024, 6, 4, 21, 38, 31, 837530, tzinfo=UTC
    )
    assert parse_expiry("2318-08-21T10:00:00Z") == datetime(2318, 8, 21, 10, tzinfo=UTC)
    assert parse_expiry("soon") == "soon"
    assert parse_expiry("2024-06-04T14:38:31") == "2024-06-04T14:38:31"  # no zone: raw
    assert parse_expiry(None) is None
    assert parse_expiry(12) is None


def test_ps_entries_are_read_leniently() -> None:
    body = (
        b'{"models": [{"name": "a:latest", "model": "a:latest", "digest": "d1",'
        b' "expires_at": "2030-01-01T00:00:00Z", "size_vram": 7},'
        b' {"model": "b:1"}, 3, {"size": 1}]}'
    )
    assert parse_ps(body) == (
        LoadedModel("a:latest", "a:latest", "d1", datetime(2030, 1, 1, tzinfo=UTC), 7),
        LoadedModel("b:1", "b:1"),
    )


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, b'{"error":"timed out waiting for llama runner to start - progress 0.00 - "}', "t"),
        (500, b'{"error":"llama runner process has terminated: exit status 2"}', "b"),
        (404, b'{"error":"model \'m\' not found"}', "b"),
        (200, b'{"done":true,"done_reason":"load"}', None),
    ],
)
def test_load_replies_map_to_errors(status: int, body: bytes, kind: str | None) -> None:
    if kind is None:
        check_load_reply(status, body)
        return
    with pytest.raises(BackendError) as caught:
        check_load_reply(status, body)
    assert isinstance(caught.value, OllamaLoadTimeout) is (kind == "t")
    assert str(caught.value) == f"ollama load returned HTTP {status}: {body.decode()[:200]}"


def loaded_at(expires_at: datetime | str | None) -> LoadedModel:
    return LoadedModel("m:latest", "m:latest", expires_at=expires_at)


def test_expiry_watch_accepts_the_idle_timer_restarting() -> None:
    watch = ExpiryWatch.after_load(loaded_at(T0))
    watch, verdict = watch.observe(loaded_at(T0), 10.0)
    assert verdict == "kept"
    watch, verdict = watch.observe(loaded_at(T0 + timedelta(seconds=42)), 45.0)
    assert verdict == "kept"  # a request finished about 42 s after the load
    assert watch.last == T0 + timedelta(seconds=42)
    assert watch.observe(None, 50.0)[1] == "gone"


@pytest.mark.parametrize(
    ("moved_s", "elapsed_s"),
    [
        (-(300 * 365 * 86400.0), 60.0),  # forever -> "5m": the expiry jumped back centuries
        (-60.0, 10.0),  # earlier than ever possible
        (3600.0, 60.0),  # later than time has passed: a longer keep_alive
    ],
)
def test_expiry_watch_notices_a_foreign_keep_alive(moved_s: float, elapsed_s: float) -> None:
    watch = ExpiryWatch.after_load(loaded_at(T0))
    _, verdict = watch.observe(loaded_at(T0 + timedelta(seconds=moved_s)), elapsed_s)
    assert verdict == "changed"


def test_expiry_watch_notices_a_shorter_keep_alive_set_late() -> None:
    """ "30m" at load, "5m" by a foreign client 26 minutes later: the new expiry (load + 31m)
    is later than the old one, but earlier than any request finishing now could give."""
    watch = ExpiryWatch.after_load(loaded_at(T0))
    watch, verdict = watch.observe(loaded_at(T0), 26 * 60.0)
    assert verdict == "kept"
    _, verdict = watch.observe(loaded_at(T0 + timedelta(minutes=1)), 26 * 60.0 + 1)
    assert verdict == "changed"


def test_expiry_watch_compares_unparsed_expiries_by_equality() -> None:
    watch = ExpiryWatch.after_load(loaded_at("soon"))
    assert watch.observe(loaded_at("soon"), 5.0)[1] == "kept"
    assert watch.observe(loaded_at("later"), 5.0)[1] == "changed"


# --- against the fake, under MockClock -----------------------------------------------------


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


# --- error paths on MockTransport ------------------------------------------------------------

Handler = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


def mock(handler: Handler, **timeouts: float) -> OllamaClient:
    timeout_s = timeouts.get("timeout_s", 5.0)
    load_s = timeouts.get("load_timeout_s", 900.0)
    transport = httpx.MockTransport(handler)
    return OllamaClient.open(
        "http://o.test", timeout_s=timeout_s, load_timeout_s=load_s, transport=transport
    )


def replying(status: int, content: bytes) -> Handler:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    return handle


@pytest.mark.parametrize(
    ("status", "content", "message"),
    [
        (500, b"boom", "ollama GET /api/ps returned HTTP 500: boom"),
        (200, b"<html>", "ollama GET /api/ps: reply is not JSON: <html>"),
        (200, b"[1]", "ollama GET /api/ps: reply is not a JSON object: [1]"),
        (200, b'{"models": null}', "ollama GET /api/ps: reply has no models list"),
    ],
)
async def test_bad_list_replies_are_backend_errors(
    status: int, content: bytes, message: str
) -> None:
    async with mock(replying(status, content)) as client:
        with pytest.raises(BackendError) as caught:
            await client.ps()
        with pytest.raises(BackendError):
            await client.resident("tiny")  # errors are not "not resident"
    assert str(caught.value) == message


async def test_version_needs_a_version_string() -> None:
    async with mock(replying(200, b'{"v": 1}')) as client:
        with pytest.raises(BackendError, match="no version string"):
            await client.version()


async def test_unload_failure_names_the_status() -> None:
    async with mock(replying(500, b'{"error":"busy"}')) as client:
        with pytest.raises(BackendError) as caught:
            await client.unload("tiny")
    assert str(caught.value) == 'ollama unload returned HTTP 500: {"error":"busy"}'


async def test_an_unreachable_daemon_is_a_probe_failure_not_a_load_timeout() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with mock(refuse) as client:
        with pytest.raises(ProbeFailure) as caught:
            await client.load("tiny", -1)
    assert not isinstance(caught.value, OllamaLoadTimeout)
    assert caught.value.kind == "transport"


async def test_an_oversized_body_is_refused() -> None:
    async with mock(replying(200, b"x" * (MAX_BODY_BYTES + 1))) as client:
        with pytest.raises(ProbeFailure) as caught:
            await client.tags()
    assert caught.value.kind == "too-large"


async def test_wait_gone_keeps_polling_through_errors_and_gives_up_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    async def failing(request: httpx.Request) -> httpx.Response:
        calls.append(trio.current_time())
        return httpx.Response(503, content=b"starting")

    start = trio.current_time()
    async with mock(failing) as client:
        assert await client.wait_gone("tiny", deadline_s=2.0, interval_s=0.5) is False
    assert trio.current_time() - start == pytest.approx(2.0)
    assert len(calls) == 4  # at 0, 0.5, 1.0 and 1.5 s


async def test_a_slow_completion_is_a_deep_health_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await trio.sleep(60)
        return httpx.Response(200, json={})

    async with mock(slow, timeout_s=5.0) as client:
        with pytest.raises(DeepHealthTimeout):
            await client.tiny_completion("tiny")
