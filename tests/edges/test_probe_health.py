"""Tests of the probe's health reports (seed-behaviour.md section 3; FC-03): `ProbeClient`
against a `Fake`, on each of its wires (httpx on MockTransport, the lean h11 wire on
in-memory streams), for llama-server and mlx_lm.server (/health, falling back to
/v1/models) and for Ollama (/api/version, /api/tags, /api/ps), its timeouts and latency, a
real refused connection, proxy variables ignored, and the /props details.
"""

from __future__ import annotations

import attrs
import httpx
import pytest
import trio
import trio.testing

from edges.keepalive_support import keepalive_server
from edges.probe_support import Fake, Route, WireName, closed_port, fail, hang, reply
from inferactors._edges.probe import ProbeClient, ProbeFailure, Prober
from inferactors._edges.probe_h11 import H11Wire
from inferactors._edges.probe_wire import HttpxWire
from inferactors._errors import BackendError
from inferactors._flavor import InferFlavor
from inferactors._policy import probe_parse
from inferactors._policy.probe_report import Loading, ServerReport, Unhealthy, Unreachable, Up
from inferactors._safe_json import parse_json
from policy.probe_replies_support import LLAMA_LOADING, LLAMA_MODELS, OLLAMA_PS, OLLAMA_TAGS

pytestmark = pytest.mark.usefixtures("wire")


async def test_the_httpx_client_never_follows_redirects_nor_reads_proxy_env() -> None:
    async with Fake({}).client(wire="httpx") as probe:
        assert isinstance(probe.wire, HttpxWire)
        assert probe.wire.client.follow_redirects is False
        assert probe.wire.client.trust_env is False
        assert probe.timeout_s == 2.0


async def test_a_plain_http_url_gets_the_lean_wire_and_anything_else_httpx() -> None:
    assert isinstance(ProbeClient.open("http://127.0.0.1:9", timeout_s=1.0).wire, H11Wire)
    assert isinstance(ProbeClient.open("http://[::1]:9/", timeout_s=1.0).wire, H11Wire)
    for other in ("https://127.0.0.1:9", "http://127.0.0.1:9/v1"):
        assert isinstance(ProbeClient.open(other, timeout_s=1.0).wire, HttpxWire)


async def test_proxy_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    dead_proxy = f"http://127.0.0.1:{closed_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    async with keepalive_server() as server:
        for transport in (None, httpx.AsyncHTTPTransport()):
            async with ProbeClient.open(
                server.base_url, timeout_s=2.0, transport=transport
            ) as probe:
                assert (await probe.get("/health"))[0] == 200
    assert [path for _, _, path, _ in server.requests] == ["/health", "/health"]


async def test_aclose_is_idempotent_and_closes_the_client(wire: WireName) -> None:
    probe = Fake({"/health": reply(200, {"status": "ok"})}).client()
    if wire == "h11":
        assert (await probe.get("/health"))[0] == 200  # a kept connection to close
    await probe.aclose()
    await probe.aclose()
    if isinstance(probe.wire, HttpxWire):
        assert probe.wire.client.is_closed
    else:
        with pytest.raises(ProbeFailure, match="closed"):
            await probe.get("/health")


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
    assert report.lists("Llama-3.2-1B-Instruct-Q4_K_M", flavor)
    assert report.lists("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf", flavor)
    assert not report.lists("Llama-3.2-1B-Instruct", flavor)  # a prefix is another model
    assert (report.loaded, report.version) == ((), None)
    assert fake.paths == ["/health", "/v1/models"]


@pytest.mark.parametrize(
    ("flavor", "routes", "parses"),
    [
        (
            InferFlavor.LLAMACPP,
            {"/health": reply(200, {}), "/v1/models": reply(200, LLAMA_MODELS)},
            1,
        ),
        (InferFlavor.LLAMACPP, {"/v1/models": reply(200, LLAMA_MODELS)}, 1),  # the 404 fallback
        (
            InferFlavor.OLLAMA,
            {
                "/api/version": reply(200, {"version": "0.5.1"}),
                "/api/tags": reply(200, OLLAMA_TAGS),
                "/api/ps": reply(200, OLLAMA_PS),
            },
            3,
        ),
    ],
)
async def test_a_healthy_report_parses_each_reply_once(
    monkeypatch: pytest.MonkeyPatch, flavor: InferFlavor, routes: dict[str, Route], parses: int
) -> None:
    parsed: list[bytes] = []

    def counting(text: str | bytes) -> object:
        parsed.append(text if isinstance(text, bytes) else text.encode())
        return parse_json(text)

    monkeypatch.setattr(probe_parse, "parse_json", counting)
    async with Fake(routes).client() as probe:
        report = await probe.report(flavor)
    assert (report.health, report.models_problem) == (Up(), None)
    assert report.models
    assert len(parsed) == parses == len(set(parsed))


async def test_health_200_with_failing_model_list_is_up_with_no_models_and_says_why() -> None:
    fake = Fake({"/health": reply(200, {"status": "ok"}), "/v1/models": reply(401)})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    why = "model list unreadable: /v1/models returned HTTP 401"  # issue 8 item 9: not confirmed
    expected = ServerReport(Up(), latency_s=report.latency_s, models_problem=why)
    assert report == attrs.evolve(expected, refused="HTTP 401")  # a 401 also wants a key


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
    assert report.lists("llama3.2", InferFlavor.OLLAMA)
    assert not report.lists("llama3", InferFlavor.OLLAMA)
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
