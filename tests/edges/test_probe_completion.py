"""Tests of the probe's deep health, the tiny completion (FC-07, FC-09): what it sends with
and without a model, how a non-200 or malformed reply becomes a `BackendError`, and how a
completion that never answers (on MockTransport or a real silent listener) times out.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

from edges.probe_support import Fake, hang, reply
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeClient
from inferactors._errors import BackendError, DeepHealthTimeout
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_report import CompletionResult, Up
from policy.probe_replies_support import COMPLETION

pytestmark = pytest.mark.usefixtures("wire")


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
