"""Streams end truthfully through the front door, against fake servers playing faults:
death mid-stream, a stream that never ends, a slow first byte, a server that is gone or
silent. Every grant ends exactly once, and a client that leaves closes the server's
connection (so a real server stops generating: tests/e2e/test_front_door_real.py)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import httpx
import ollama
import openai
import psutil
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from inferactors._actors.front_door_resident import ResidentScheduler
from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._config.front_door import FrontDoorConfig
from inferactors._flavor import InferFlavor
from inferactors._service.front_door_server import open_front_door
from inferactors.testing import EndlessStream, FakeServer, SlowFirstToken, StreamDies, Timeline
from inferactors.testing._fake_processes import free_port
from inferactors.testing._fake_replies import TOKEN
from service.front_door_support import door, ended, entry_for, fake

# A stream cut short leaves httpx's and httpcore's async generators unexhausted
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "the cat"}]
CHAT = {"messages": USER, "stream": True}
SETTLE_S = 10.0


def _events(text: str) -> list[str]:
    return [e.removeprefix("data: ") for e in text.split("\n\n") if e.startswith("data: ")]


def _connections(server: FakeServer) -> int:
    """Established TCP connections to the fake's port."""
    return sum(
        1
        for c in psutil.Process(server.pid).net_connections("tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == server.port
    )


async def _until(condition: object) -> None:
    with trio.fail_after(SETTLE_S):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110
            await trio.sleep(0.02)


@pytest.mark.parametrize("flavor", ["llamacpp", "mlx"])
async def test_death_mid_stream_ends_with_an_error_frame_never_done(
    tmp_path: Path, flavor: str
) -> None:
    timeline = Timeline.of(StreamDies(after_tokens=2, tokens=5))
    with fake(tmp_path, flavor, timeline) as server:  # type: ignore[arg-type]
        async with door(entry_for("m", server)) as d, httpx.AsyncClient() as client:
            answer = await client.post(d.url + "/v1/chat/completions", json={"model": "m", **CHAT})
        events = _events(answer.text)
        assert answer.status_code == 200
        assert "[DONE]" not in events
        said = [json.loads(e) for e in events[:-1]]
        assert sum(TOKEN in json.dumps(e) for e in said) == 2  # both tokens passed on
        error = json.loads(events[-1])["error"]
        assert error["type"] == "server_error"
        assert "'m'" in error["message"]
        if flavor == "llamacpp":  # chunked: the transport broke
            assert "broke off" in error["message"]
        else:  # mlx_lm.server ends its streams at the close: the last event is missing
            assert "ended before its last event" in error["message"]
        ended(d.scheduler)


def _openai_stream(url: str) -> tuple[list[str], Exception | None]:
    said: list[str] = []
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        try:
            stream = client.chat.completions.create(
                model="m",
                messages=USER,
                stream=True,
            )
            for chunk in stream:
                said.extend(c.delta.content or "" for c in chunk.choices)
        except openai.APIError as error:
            return said, error
    return said, None


async def test_openai_client_raises_on_the_error_frame(tmp_path: Path) -> None:
    with fake(tmp_path, timeline=Timeline.of(StreamDies(after_tokens=3))) as server:
        async with door(entry_for("m", server)) as d:
            said, error = await trio.to_thread.run_sync(_openai_stream, d.url)
    assert "".join(said) == TOKEN * 3
    assert error is not None
    assert "broke off" in str(error)


def _ollama_stream(url: str) -> tuple[list[str], Exception | None]:
    said: list[str] = []
    with ollama.Client(host=url) as client:
        try:
            for part in client.chat(model="m", messages=USER, stream=True):
                assert not part.done, "a cut stream must never say done"
                said.append(part.message.content or "")
        except ollama.ResponseError as error:
            return said, error
    return said, None


@pytest.mark.parametrize("flavor", ["llamacpp", "mlx"])
async def test_ollama_translated_stream_ends_with_an_error_line(
    tmp_path: Path, flavor: str
) -> None:
    timeline = Timeline.of(StreamDies(after_tokens=2))
    with fake(tmp_path, flavor, timeline) as server:  # type: ignore[arg-type]
        async with door(entry_for("m", server)) as d:
            said, error = await trio.to_thread.run_sync(_ollama_stream, d.url)
        assert "".join(said) == TOKEN * 2
        assert isinstance(error, ollama.ResponseError)
        assert "'m'" in error.error
        ended(d.scheduler)


async def test_a_client_that_leaves_a_stream_closes_the_servers_connection(
    tmp_path: Path,
) -> None:
    with fake(tmp_path, timeline=Timeline.of(EndlessStream(every_s=0.05))) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient() as client:
            body = {"model": "m", **CHAT}
            async with client.stream("POST", d.url + "/v1/chat/completions", json=body) as answer:
                seen = 0
                async for chunk in answer.aiter_raw():
                    seen += chunk.count(TOKEN.encode())
                    if seen >= 3:
                        break
                assert d.scheduler.in_flight["m"] == 1
                assert _connections(server) == 1
            await _until(lambda: d.scheduler.in_flight["m"] == 0)
            await _until(lambda: _connections(server) == 0)
            ended(d.scheduler)
            # the door still serves
            whole = await client.post(d.url + "/v1/completions", json={"model": "m", "prompt": "x"})
            assert whole.status_code == 200


async def test_a_client_that_leaves_before_the_first_byte_closes_the_request(
    tmp_path: Path,
) -> None:
    with fake(tmp_path, timeline=Timeline.of(SlowFirstToken(delay_s=60.0))) as server:
        async with door(entry_for("m", server)) as d:
            async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
                url = d.url + "/v1/chat/completions"
                nursery.start_soon(partial(client.post, url, json={"model": "m", **CHAT}))
                await _until(lambda: _connections(server) == 1)
                nursery.cancel_scope.cancel()
            await _until(lambda: d.scheduler.in_flight["m"] == 0)
            await _until(lambda: _connections(server) == 0)
            ended(d.scheduler)


async def test_a_silent_server_is_a_504_and_a_stalled_stream_an_error_frame(
    tmp_path: Path,
) -> None:
    config = FrontDoorConfig(port=0, read_timeout_s=0.5)
    with fake(tmp_path / "slow", timeline=Timeline.of(SlowFirstToken(delay_s=30.0))) as slow:
        stalled = Timeline.of(StreamDies(after_tokens=2, tokens=3, every_s=30.0))
        with fake(tmp_path / "stall", timeline=stalled) as stall:
            models = (entry_for("slow", slow), entry_for("stall", stall))
            async with door(*models, config=config) as d, httpx.AsyncClient() as client:
                late = await client.post(
                    d.url + "/v1/chat/completions", json={"model": "slow", **CHAT}
                )
                stopped = await client.post(
                    d.url + "/v1/chat/completions", json={"model": "stall", **CHAT}
                )
    assert late.status_code == 504
    assert "'slow': no answer in time" in late.json()["error"]["message"]
    last = json.loads(_events(stopped.text)[-1])
    assert "ReadTimeout" in last["error"]["message"]
    ended(d.scheduler)


async def test_a_server_that_is_gone_is_a_502_in_the_dialect() -> None:
    port = free_port()
    entry = ModelEntry("gone", (), InferFlavor.LLAMACPP, Residency.RESIDENT, False)
    upstream = Upstream("gone", InferFlavor.LLAMACPP, f"http://127.0.0.1:{port}", "")
    async with door((entry, upstream)) as d, httpx.AsyncClient() as client:
        openai_answer = await client.post(d.url + "/v1/completions", json={"model": "gone"})
        ollama_answer = await client.post(
            d.url + "/api/generate", json={"model": "gone", "prompt": "x"}
        )
    assert openai_answer.status_code == 502
    assert "cannot be reached" in openai_answer.json()["error"]["message"]
    assert ollama_answer.status_code == 502
    assert "cannot be reached" in ollama_answer.json()["error"]
    ended(d.scheduler)


async def test_a_refused_grant_is_a_503_with_retry_after(tmp_path: Path) -> None:
    with fake(tmp_path) as server:
        scheduler = ResidentScheduler([entry_for("m", server)], ready=lambda name: False)
        config = FrontDoorConfig(port=0)
        async with open_front_door(scheduler, config) as opened, httpx.AsyncClient() as client:
            refused = await client.post(
                opened.url + "/api/chat", json={"model": "m", "messages": []}
            )
            listed = await client.get(opened.url + "/v1/models")
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert "not ready" in refused.json()["error"]
    assert listed.json()["data"][0]["status"] == {"value": "not-loaded"}
    assert not scheduler.granted
