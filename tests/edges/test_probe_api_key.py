"""Probers opened for a server with an API key send it as ``Authorization: Bearer`` on every
request, and still ask for identity encoding (issue 9 item 4): through httpx's transport and
through the lean wire to a real loopback server."""

from __future__ import annotations

import httpx

from edges.hostile_server_support import Reply, hostile_server
from inferactors._edges.bundle import http_prober_factory
from inferactors._edges.probe import ProbeClient
from inferactors._edges.probe_auth import with_api_key
from inferactors._edges.probe_h11 import H11Wire


async def test_the_key_goes_with_every_request_and_identity_encoding_stays() -> None:
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={"data": [{"id": "tiny"}]})

    factory = with_api_key(http_prober_factory(httpx.MockTransport(answer)), "sk-1")
    prober = factory("http://127.0.0.1:9", 2.0, headers={"Accept-Encoding": "gzip", "X-A": "b"})
    assert isinstance(prober, ProbeClient)
    await prober.get("/health")
    await prober.post_json("/v1/chat/completions", {"max_tokens": 1})
    await prober.aclose()
    assert [h["authorization"] for h in seen] == ["Bearer sk-1", "Bearer sk-1"]
    assert {h["accept-encoding"] for h in seen} == {"identity"}
    assert seen[0]["x-a"] == "b"
    assert "sk-1" not in repr(prober)


def test_without_a_key_the_factory_is_the_same() -> None:
    factory = http_prober_factory()
    assert with_api_key(factory, None) is factory


async def test_the_lean_wire_sends_the_key_too_and_never_shows_it() -> None:
    replies = {"/health": Reply(body=b"{}"), "/v1/chat/completions": Reply(body=b"{}")}
    async with hostile_server(replies) as server:
        factory = with_api_key(http_prober_factory(), "sk-1")
        prober = factory(server.base_url, 2.0, headers={"Accept-Encoding": "gzip", "X-A": "b"})
        assert isinstance(prober, ProbeClient)
        assert isinstance(prober.wire, H11Wire)
        await prober.get("/health")
        await prober.post_json("/v1/chat/completions", {"max_tokens": 1})
        await prober.aclose()
    assert [h["authorization"] for h in server.seen] == ["Bearer sk-1", "Bearer sk-1"]
    assert {h["accept-encoding"] for h in server.seen} == {"identity"}
    assert server.seen[0]["x-a"] == "b"
    assert "sk-1" not in repr(prober)
