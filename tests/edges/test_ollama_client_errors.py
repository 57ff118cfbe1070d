"""Tests of the Ollama client's error paths on ``httpx.MockTransport`` with fixed replies:
bad list replies, a missing version, a failed unload, an unreachable daemon, an oversized
body, polling through errors until the deadline, and a completion slower than its timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine

import httpx
import pytest
import trio
import trio.testing

from inferactors._edges.ollama_client import OllamaClient
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeFailure
from inferactors._errors import BackendError, DeepHealthTimeout
from inferactors._policy.ollama_parse import OllamaLoadTimeout

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
