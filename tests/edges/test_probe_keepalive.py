"""Kept-alive probe connections (issue 11 item 1), against a real loopback server: a
client's probes share one TCP connection; a GET that meets a connection the server closed
is sent again on a fresh one, within the call's deadline; a GET on a fresh connection, and
any POST, is never sent twice."""

from __future__ import annotations

import pytest
import trio

from edges.keepalive_support import keepalive_server
from inferactors._edges.probe import ProbeClient, ProbeFailure
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_report import Unreachable, Up


async def test_ten_probes_of_one_client_share_one_connection() -> None:
    async with (
        keepalive_server() as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        for _ in range(10):
            report = await probe.report(InferFlavor.LLAMACPP)
            assert (report.health, report.models) == (Up(), ("tiny.gguf",))
            await trio.sleep(0.01)
    assert server.connections == 1
    assert len(server.requests) == 20  # /health and /v1/models each time


async def test_a_get_that_meets_a_closed_kept_connection_is_sent_again_on_a_fresh_one() -> None:
    async with (
        keepalive_server(drop="reused") as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        assert await probe.get("/health") == (200, b'{"status": "ok"}')
        assert await probe.get("/health") == (200, b'{"status": "ok"}')  # not "unreachable"
    assert server.requests == [
        (1, "GET", "/health", True),
        (1, "GET", "/health", False),  # dropped: the server had closed it
        (2, "GET", "/health", True),
    ]


async def test_a_get_on_a_fresh_connection_is_sent_once() -> None:
    async with (
        keepalive_server(drop="all") as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        report = await probe.report(InferFlavor.LLAMACPP)
    assert isinstance(report.health, Unreachable)
    assert "Server disconnected" in report.health.why
    assert server.requests == [(1, "GET", "/health", False)]


async def test_a_post_goes_on_its_own_connection_and_is_never_sent_twice() -> None:
    async with (
        keepalive_server(drop="all") as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        with pytest.raises(ProbeFailure, match="Server disconnected"):
            await probe.post_json("/v1/chat/completions", {"max_tokens": 1})
    assert server.requests == [(1, "POST", "/v1/chat/completions", False)]


async def test_a_post_after_gets_does_not_ride_their_kept_connection() -> None:
    async with (
        keepalive_server(drop="reused") as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        await probe.get("/health")
        status, _ = await probe.post_json("/v1/chat/completions", {"max_tokens": 1})
        again, _ = await probe.post_json("/v1/chat/completions", {"max_tokens": 1})
    assert (status, again) == (200, 200)
    assert [number for number, *_ in server.requests] == [1, 2, 3]  # a connection each
