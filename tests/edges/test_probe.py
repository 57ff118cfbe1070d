"""The HTTP probe (seed-behaviour.md section 3; server-apis.md 1 to 3; FC-03, FC-07, FC-09).

Most tests run `ProbeClient` on ``httpx.MockTransport`` through `Fake`, which serves fixed
routes, answers 404 elsewhere (as mlx_lm.server does) and records every path requested. A few
use real loopback sockets: connection refused, a listener that never answers, `port_in_use`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import httpx
import pytest
import trio
import trio.testing

from inferactors._edges.netcheck import port_in_use
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeClient, ProbeFailure, Prober
from inferactors._errors import BackendError, DeepHealthTimeout
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_parse import (
    CompletionResult,
    Loading,
    ServerReport,
    Unhealthy,
    Unreachable,
    Up,
    classify_health,
    classify_models_status,
    classify_ollama_version,
    completion_body,
    parse_completion,
    parse_model_ids,
    parse_ollama_version,
)

Route = Callable[[httpx.Request], Awaitable[httpx.Response]]

LLAMA_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",
            "object": "model",
            "owned_by": "llamacpp",
            "created": 1735142223,
            "meta": {"vocab_type": 2, "n_vocab": 128256, "n_ctx_train": 131072},
        }
    ],
}
LLAMA_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
OLLAMA_TAGS = {
    "models": [
        {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189},
        {"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size": 397821319},
    ]
}
OLLAMA_PS = {"models": [{"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size_vram": 1}]}
COMPLETION = {
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": " and"}, "finish_reason": "length"}
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
}


def reply(status: int, body: object = None, headers: dict[str, str] | None = None) -> Route:
    """A route answering ``status`` with ``body`` (bytes as is, anything else as JSON)."""

    async def route(request: httpx.Request) -> httpx.Response:
        if body is None or isinstance(body, bytes):
            return httpx.Response(status, content=body or b"", headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return route


def fail(exc: Exception) -> Route:
    """A route whose transport raises ``exc``."""

    async def route(request: httpx.Request) -> httpx.Response:
        raise exc

    return route


async def hang(request: httpx.Request) -> httpx.Response:
    """A route that never answers."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@attrs.define
class Fake:
    """A server on MockTransport: fixed routes by path, 404 elsewhere, every request kept."""

    routes: dict[str, Route]
    requests: list[httpx.Request] = attrs.Factory(list)

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get(request.url.path)
        return httpx.Response(404) if route is None else await route(request)

    def client(self, timeout_s: float = 2.0) -> ProbeClient:
        transport = httpx.MockTransport(self.handle)
        return ProbeClient.open("http://127.0.0.1:8090", timeout_s=timeout_s, transport=transport)


def closed_port() -> int:
    """A loopback port with nothing listening (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------------------- pure logic


@pytest.mark.parametrize(
    ("status", "health"),
    [
        (200, Up()),
        (503, Loading()),
        (404, None),
        (302, Unhealthy("/health returned HTTP 302")),
        (500, Unhealthy("/health returned HTTP 500")),
        (401, Unhealthy("/health returned HTTP 401")),
    ],
)
def test_classify_health(status: int, health: object) -> None:
    assert classify_health(status) == health


def test_classify_health_reads_llama_and_old_llama_503_bodies_as_loading() -> None:
    assert classify_health(503, json.dumps(LLAMA_LOADING).encode()) == Loading()
    assert classify_health(503, b'{"status":"loading model"}') == Loading()
    assert classify_health(503, b"<html>not json</html>") == Loading()


def test_mlx_dead_generation_thread_503_is_unhealthy_not_loading() -> None:
    health = classify_health(503, b'{"status": "unavailable"}')
    assert isinstance(health, Unhealthy)
    assert "HTTP 503" in health.why


@pytest.mark.parametrize(
    ("status", "health"),
    [(200, Up()), (503, Loading()), (500, Unhealthy("/v1/models returned HTTP 500"))],
)
def test_classify_models_status(status: int, health: object) -> None:
    assert classify_models_status(status) == health


@pytest.mark.parametrize(
    ("status", "health"),
    [(200, Up()), (503, Loading()), (404, Unhealthy("/api/version returned HTTP 404"))],
)
def test_classify_ollama_version(status: int, health: object) -> None:
    assert classify_ollama_version(status) == health


@pytest.mark.parametrize(
    ("body", "ids"),
    [
        (json.dumps(LLAMA_MODELS).encode(), ("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",)),
        (b'{"object":"list","data":[{"id":"tiny","object":"model","meta":null}]}', ("tiny",)),
        (
            b'{"object":"list","data":[{"id":"/abs/dir","object":"model","created":1}]}',
            ("/abs/dir",),
        ),
        (json.dumps(OLLAMA_TAGS).encode(), ("llama3.2:latest", "qwen2.5:0.5b")),
        (b'{"object":"list","data":[]}', ()),
        (b'{"data":[{"id":7},{"object":"model"},"x",{"id":"ok"}]}', ("ok",)),
        (b"", ()),
        (b"not json", ()),
        (b"[1, 2]", ()),
        (b"\xff\xfe", ()),
    ],
)
def test_parse_model_ids(body: bytes, ids: tuple[str, ...]) -> None:
    assert parse_model_ids(body) == ids


def test_parse_ollama_version() -> None:
    assert parse_ollama_version(b'{"version":"0.5.1"}') == "0.5.1"
    assert parse_ollama_version(b'{"version":5}') is None
    assert parse_ollama_version(b"") is None


def test_completion_body_without_model_has_no_model_field() -> None:
    assert completion_body(None) == {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "stream": False,
    }


def test_completion_body_with_model_names_it() -> None:
    body = completion_body("/abs/tiny-mlx")
    assert body["model"] == "/abs/tiny-mlx"
    assert body["max_tokens"] == 1


def test_parse_completion_reads_text_and_finish_reason() -> None:
    assert parse_completion(200, json.dumps(COMPLETION).encode()) == (" and", "length")


def test_parse_completion_accepts_reasoning_content_when_content_is_null() -> None:
    message = {"role": "assistant", "content": None, "reasoning_content": "<think>"}
    body = json.dumps({"choices": [{"message": message, "finish_reason": None}]}).encode()
    assert parse_completion(200, body) == ("<think>", None)


def test_parse_completion_non_200_quotes_the_first_200_chars() -> None:
    body = b'{"error": "generation thread died"}' + b"x" * 500
    with pytest.raises(BackendError) as caught:
        parse_completion(404, body)
    message = str(caught.value)
    assert message.startswith('deep health: completion returned HTTP 404: {"error": "generation')
    assert message.endswith("x" * (200 - 35))
    assert len(message) == len("deep health: completion returned HTTP 404: ") + 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"<html>oops</html>", "not a JSON object"),
        (b'{"object":"chat.completion"}', "choices[0]"),
        (b'{"choices":[]}', "choices[0]"),
        (b'{"choices":[{"finish_reason":"stop"}]}', "choices[0].message"),
        (b'{"choices":[{"message":{"content":7}}]}', "choices[0].message.content"),
        (b'{"choices":[{"message":{"role":"assistant"}}]}', "choices[0].message.content"),
    ],
)
def test_parse_completion_malformed_body_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(BackendError, match=r"^deep health: completion body") as caught:
        parse_completion(200, body)
    assert field in str(caught.value)


# ---------------------------------------------------------------------------- the client


async def test_client_never_follows_redirects_nor_reads_proxy_env() -> None:
    async with Fake({}).client() as probe:
        assert probe._client.follow_redirects is False
        assert probe._client.trust_env is False
        assert probe.timeout_s == 2.0


async def test_aclose_is_idempotent_and_closes_the_client() -> None:
    probe = Fake({}).client()
    await probe.aclose()
    await probe.aclose()
    assert probe._client.is_closed


def test_probe_client_satisfies_the_prober_protocol() -> None:
    prober: Prober = Fake({}).client()  # a mypy check as much as a runtime one
    assert isinstance(prober, ProbeClient)


@pytest.mark.parametrize("flavor", [InferFlavor.LLAMACPP, InferFlavor.MLX_LM])
async def test_health_200_is_up_and_lists_models(flavor: InferFlavor) -> None:
    fake = Fake({"/health": reply(200, {"status": "ok"}), "/v1/models": reply(200, LLAMA_MODELS)})
    async with fake.client() as probe:
        report = await probe.report(flavor)
    assert report.health == Up()
    assert report.models == ("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",)
    assert report.lists("Llama-3.2-1B-Instruct")
    assert (report.loaded, report.version) == ((), None)
    assert fake.paths == ["/health", "/v1/models"]


async def test_health_200_with_failing_model_list_is_up_with_no_models() -> None:
    fake = Fake({"/health": reply(200, {"status": "ok"}), "/v1/models": reply(401)})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report == ServerReport(Up(), latency_s=report.latency_s)


async def test_mlx_models_200_with_empty_body_is_up_with_no_models() -> None:
    fake = Fake({"/health": reply(200, {"status": "ok"}), "/v1/models": reply(200, b"")})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.MLX_LM)
    assert (report.health, report.models) == (Up(), ())


async def test_fc03_models_200_while_health_503_is_loading() -> None:
    models_loading = {"object": "list", "data": [{"id": "tiny", "meta": None}]}
    fake = Fake(
        {
            "/health": reply(503, LLAMA_LOADING),
            "/v1/models": reply(200, models_loading),
            "/v1/chat/completions": reply(503, LLAMA_LOADING),
        }
    )
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report == ServerReport(Loading(), latency_s=report.latency_s)
    assert fake.paths == ["/health"]


@pytest.mark.parametrize(
    ("models_route", "health"),
    [
        (reply(200, LLAMA_MODELS), Up()),
        (reply(503, LLAMA_LOADING), Loading()),
        (reply(500), Unhealthy("/v1/models returned HTTP 500")),
    ],
)
async def test_health_404_falls_back_to_models(models_route: Route, health: object) -> None:
    fake = Fake({"/v1/models": models_route})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == health
    assert fake.paths == ["/health", "/v1/models"]  # the fallback body is reused when Up
    expected = ("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",) if health == Up() else ()
    assert report.models == expected


async def test_health_404_then_models_transport_error_is_unreachable() -> None:
    fake = Fake({"/v1/models": fail(httpx.ReadError("connection reset by peer"))})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.MLX_LM)
    assert report.health == Unreachable("GET /v1/models: connection reset by peer")


async def test_health_302_is_unhealthy_and_not_followed() -> None:
    fake = Fake(
        {
            "/health": reply(302, headers={"Location": "http://127.0.0.1:8090/elsewhere"}),
            "/elsewhere": reply(200, {"status": "ok"}),
        }
    )
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unhealthy("/health returned HTTP 302")
    assert "/elsewhere" not in fake.paths
    assert fake.paths == ["/health"]


async def test_health_500_is_unhealthy() -> None:
    fake = Fake({"/health": reply(500, {"status": "error"})})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unhealthy("/health returned HTTP 500")
    assert report.models == ()


async def test_mlx_dead_generator_report_is_unhealthy() -> None:
    fake = Fake(
        {
            "/health": reply(503, {"status": "unavailable"}),
            "/v1/models": reply(200, {"object": "list", "data": []}),
        }
    )
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.MLX_LM)
    assert isinstance(report.health, Unhealthy)


async def test_transport_error_is_unreachable_with_the_request_named() -> None:
    fake = Fake({"/health": fail(httpx.ConnectError("[Errno 111] Connection refused"))})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unreachable("GET /health: [Errno 111] Connection refused")


async def test_real_connection_refused_is_unreachable() -> None:
    base = f"http://127.0.0.1:{closed_port()}"
    async with ProbeClient.open(base, timeout_s=2.0) as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
        with pytest.raises(BackendError, match=r"^deep health: POST /v1/chat/completions: "):
            await probe.tiny_completion(None)
    assert isinstance(report.health, Unreachable)
    assert report.health.why.startswith("GET /health: ")


async def test_health_latency_is_measured_on_the_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_health(request: httpx.Request) -> httpx.Response:
        await trio.sleep(0.25)
        return httpx.Response(200, json={"status": "ok"})

    async def slow_models(request: httpx.Request) -> httpx.Response:
        await trio.sleep(5.0)  # not part of the health latency
        return httpx.Response(200, json=LLAMA_MODELS)

    fake = Fake({"/health": slow_health, "/v1/models": slow_models})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.latency_s == pytest.approx(0.25)


async def test_health_slower_than_timeout_is_unreachable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with Fake({"/health": hang}).client(timeout_s=2.0) as probe:
        started = trio.current_time()
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unreachable("GET /health: no complete reply within 2 s")
    assert trio.current_time() - started == pytest.approx(2.0)


# ---------------------------------------------------------------------------- body size


def counted_chunks(pulled: list[int], count: int, size: int) -> AsyncIterator[bytes]:
    """A streamed body of ``count`` chunks of ``size`` bytes; ``pulled[0]`` counts reads."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(count):
            pulled[0] += 1
            yield b"x" * size

    return chunks()


# Cutting a stream short leaves httpx's nested generators (and this fake's) for trio to close,
# which it does with a ResourceWarning (encode/httpx#3686); the cap itself is what we test.
@pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning")
async def test_streamed_body_over_1_mib_stops_early() -> None:
    pulled = [0]
    chunk = 64 * 1024  # 16 chunks are exactly 1 MiB; the stream offers 64 (4 MiB)

    async def big(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=counted_chunks(pulled, 64, chunk))

    async with Fake({"/big": big}).client() as probe:
        with pytest.raises(ProbeFailure, match=r"^GET /big: response too large \(over 1 MiB\)$"):
            await probe.get("/big")
    assert pulled[0] == 17


async def test_declared_length_over_1_mib_fails_before_reading() -> None:
    pulled = [0]

    async def big(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Length": str(MAX_BODY_BYTES + 1)}
        return httpx.Response(200, headers=headers, content=counted_chunks(pulled, 1, 1))

    async with Fake({"/big": big}).client() as probe:
        with pytest.raises(ProbeFailure, match="response too large") as caught:
            await probe.get("/big")
    assert caught.value.kind == "too-large"
    assert pulled[0] == 0


async def test_body_of_exactly_1_mib_is_accepted() -> None:
    pulled = [0]

    async def streamed(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=counted_chunks(pulled, 16, 64 * 1024))

    fake = Fake({"/fixed": reply(200, b"y" * MAX_BODY_BYTES), "/streamed": streamed})
    async with fake.client() as probe:
        assert await probe.get("/fixed") == (200, b"y" * MAX_BODY_BYTES)
        status, body = await probe.get("/streamed")
    assert (status, len(body)) == (200, MAX_BODY_BYTES)


async def test_oversized_health_body_is_unhealthy_not_unreachable() -> None:
    fake = Fake({"/health": reply(200, b"z" * (MAX_BODY_BYTES + 1))})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unhealthy("GET /health: response too large (over 1 MiB)")


# ---------------------------------------------------------------------------- Ollama


async def test_ollama_up_reads_version_tags_and_ps() -> None:
    fake = Fake(
        {
            "/api/version": reply(200, {"version": "0.5.1"}),
            "/api/tags": reply(200, OLLAMA_TAGS),
            "/api/ps": reply(200, OLLAMA_PS),
        }
    )
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.OLLAMA)
    assert report.health == Up()
    assert report.version == "0.5.1"
    assert report.models == ("llama3.2:latest", "qwen2.5:0.5b")
    assert report.loaded == ("qwen2.5:0.5b",)
    assert report.lists("llama3.2")
    assert not report.resident("llama3.2")
    assert report.resident("qwen2.5:0.5b")
    assert fake.paths == ["/api/version", "/api/tags", "/api/ps"]


@pytest.mark.parametrize(
    ("route", "health"),
    [
        (reply(503), Loading()),
        (reply(500), Unhealthy("/api/version returned HTTP 500")),
        (fail(httpx.ConnectError("refused")), Unreachable("GET /api/version: refused")),
    ],
)
async def test_ollama_not_up_skips_the_lists(route: Route, health: object) -> None:
    fake = Fake({"/api/version": route, "/api/tags": reply(200, OLLAMA_TAGS)})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.OLLAMA)
    assert report == ServerReport(health, latency_s=report.latency_s)  # type: ignore[arg-type]  # health is a parametrized Health
    assert fake.paths == ["/api/version"]


async def test_ollama_failing_lists_leave_them_empty() -> None:
    fake = Fake(
        {
            "/api/version": reply(200, {"version": "0.5.1"}),
            "/api/tags": reply(500),
            "/api/ps": fail(httpx.ReadError("reset")),
        }
    )
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.OLLAMA)
    assert (report.health, report.models, report.loaded) == (Up(), (), ())


# ---------------------------------------------------------------------------- /props


async def test_props_and_build_info() -> None:
    props = {"build_info": "b1-0c1e570", "model_path": "/m/tiny.gguf", "total_slots": 1}
    async with Fake({"/props": reply(200, props)}).client() as probe:
        assert await probe.props() == props
        assert await probe.build_info() == "b1-0c1e570"


@pytest.mark.parametrize(
    "route",
    [reply(404), reply(200, b"[1]"), reply(200, b"nope"), fail(httpx.ConnectError("refused"))],
)
async def test_props_failure_is_none(route: Route) -> None:
    async with Fake({"/props": route}).client() as probe:
        assert await probe.props() is None
        assert await probe.build_info() is None


# ---------------------------------------------------------------------------- completion


async def test_tiny_completion_without_model_sends_no_model_field() -> None:
    fake = Fake({"/v1/chat/completions": reply(200, COMPLETION)})
    async with fake.client() as probe:
        result = await probe.tiny_completion(None)
    assert result == CompletionResult(" and", result.latency_s, "length")
    [request] = fake.requests
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["content-length"] == str(len(request.content))  # mlx needs it (411)
    sent = json.loads(request.content)
    assert sent == {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "stream": False,
    }


async def test_tiny_completion_with_model_sends_it() -> None:
    fake = Fake({"/v1/chat/completions": reply(200, COMPLETION)})
    async with fake.client() as probe:
        await probe.tiny_completion("llama3.2:latest")
    sent = json.loads(fake.requests[0].content)
    assert sent["model"] == "llama3.2:latest"
    assert sent["max_tokens"] == 1


async def test_fc09_mlx_completion_model_field_absent_or_exactly_the_model_path() -> None:
    served = "/abs/tiny-mlx"

    async def mlx_chat(request: httpx.Request) -> httpx.Response:
        model = json.loads(request.content).get("model", served)
        if model != served:  # mlx_lm.server would try the Hub and fail offline
            return httpx.Response(404, json={"error": f"{model} not found"})
        return httpx.Response(200, json=COMPLETION)

    async with Fake({"/v1/chat/completions": mlx_chat}).client() as probe:
        assert (await probe.tiny_completion(None)).text == " and"
        assert (await probe.tiny_completion(served)).text == " and"
        with pytest.raises(BackendError, match="completion returned HTTP 404"):
            await probe.tiny_completion("tiny-mlx")


async def test_tiny_completion_non_200_is_backend_error() -> None:
    dead = reply(404, {"error": "generation thread died"})
    async with Fake({"/v1/chat/completions": dead}).client() as probe:
        with pytest.raises(BackendError) as caught:
            await probe.tiny_completion(None)
    assert str(caught.value) == (
        'deep health: completion returned HTTP 404: {"error":"generation thread died"}'
    )
    assert not isinstance(caught.value, DeepHealthTimeout)


async def test_tiny_completion_malformed_body_is_backend_error() -> None:
    route = reply(200, {"choices": [{"message": {"content": None}}]})
    async with Fake({"/v1/chat/completions": route}).client() as probe:
        with pytest.raises(BackendError, match=r"choices\[0\]\.message\.content is not a string"):
            await probe.tiny_completion(None)


async def test_fc07_mlx_health_200_but_completion_hangs_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = Fake({"/health": reply(200, {"status": "ok"}), "/v1/chat/completions": hang})
    async with fake.client(timeout_s=300.0) as probe:
        assert (await probe.report(InferFlavor.MLX_LM)).health == Up()
        started = trio.current_time()
        with pytest.raises(DeepHealthTimeout, match="within 300 s") as caught:
            await probe.tiny_completion(None)
    assert trio.current_time() - started == pytest.approx(300.0)
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, BackendError)


async def test_completion_timeout_against_a_real_silent_listener() -> None:
    # The kernel completes the handshake from the backlog; nobody ever reads or answers.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    try:
        async with ProbeClient.open(f"http://127.0.0.1:{port}", timeout_s=0.2) as probe:
            with pytest.raises(DeepHealthTimeout, match=r"within 0\.2 s"):
                await probe.tiny_completion(None)
    finally:
        await trio.aclose_forcefully(listeners[0])


async def test_completion_body_over_1_mib_is_backend_error() -> None:
    route = reply(200, b"{" + b" " * MAX_BODY_BYTES + b"}")
    async with Fake({"/v1/chat/completions": route}).client() as probe:
        with pytest.raises(BackendError, match=r"^deep health: .*response too large"):
            await probe.tiny_completion(None)


# ---------------------------------------------------------------------------- port_in_use


async def test_port_in_use_true_for_a_real_listener() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    try:
        port = listeners[0].socket.getsockname()[1]
        assert await port_in_use("127.0.0.1", port)
    finally:
        await trio.aclose_forcefully(listeners[0])


async def test_port_in_use_false_for_a_closed_port() -> None:
    assert not await port_in_use("127.0.0.1", closed_port())
