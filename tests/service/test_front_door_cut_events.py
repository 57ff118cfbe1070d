"""A server's stream cut inside an event (or inside an NDJSON line) ends, through the front
door, with the last whole event and then one error event in the dialect: the half-sent event
is dropped, so the real clients (``openai``, ``ollama``) raise their API error with the
server's words, never a JSON decoding error, and never see a made-up end.

The cuts are the kits' own faults: `FakeServerFaults(cut_stream_after=N)` (llama-server's
chunked stream ends without its last chunk; mlx_lm.server's, which ends at the close, just
ends early) and `FakeOllamaConfig(cut_stream_after=N)` (Ollama's NDJSON, chunked)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import httpx
import ollama
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from inferactors._actors.front_door_resident import ResidentScheduler
from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._edges.upstream import UpstreamClients
from inferactors._flavor import InferFlavor
from inferactors._service.front_door_app import FrontDoorLimits, front_door_app
from inferactors._service.front_door_relay import ReplyLimits
from inferactors.testing import FakeServerFaults, open_fake_ollama, open_fake_server
from inferactors.testing._fake_faults import Flavor
from inferactors.testing._fake_replies import TOKEN
from service.front_door_support import door, ended, entry_for

pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "the cat"}]
CHAT = {"messages": USER, "stream": True}
CUTS = (60, 310, 380)
"""Bytes of the server's stream before the cut: inside its first event, inside the first
token's event, inside a later token's event (each checked to end mid-event)."""
WORDS = {"llamacpp": "broke off", "mlx": "ended before its last event"}
"""The words the error names: llama-server's chunked stream breaks; mlx_lm.server's ends."""


async def _raw_from(base_url: str, target: str, body: Mapping[str, object]) -> bytes:
    """What the server itself sends (no door), up to the cut."""
    got = b""
    async with httpx.AsyncClient() as client:
        try:
            async with client.stream("POST", base_url + target, json=body) as answer:
                async for chunk in answer.aiter_bytes():
                    got += chunk
        except httpx.RemoteProtocolError:
            pass
    return got


def _openai_stream(url: str) -> tuple[list[str], Exception]:
    said: list[str] = []
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        try:
            for chunk in client.chat.completions.create(model="m", messages=USER, stream=True):
                said.extend(c.delta.content or "" for c in chunk.choices)
        except Exception as error:  # the test says which kind it must be
            return said, error
    raise AssertionError("the cut stream ended without an error")


@pytest.mark.parametrize("flavor", ["llamacpp", "mlx"])
@pytest.mark.parametrize("cut", CUTS)
async def test_an_sse_stream_cut_inside_an_event_ends_with_a_whole_error_event(
    flavor: Flavor, cut: int
) -> None:
    faults = FakeServerFaults(stream_tokens=5, cut_stream_after=cut)
    async with open_fake_server(flavor=flavor, faults=faults) as server:  # it cuts one answer
        raw = await _raw_from(server.base_url, "/v1/chat/completions", {"model": "m", **CHAT})
    assert raw
    assert not raw.endswith(b"\n\n"), "the fault must cut inside an event"
    async with open_fake_server(flavor=flavor, faults=faults) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient() as client:
            answer = await client.post(d.url + "/v1/chat/completions", json={"model": "m", **CHAT})
            assert answer.status_code == 200
            assert answer.text.endswith("\n\n")
            events = [e for e in answer.text.split("\n\n") if e]
            assert all(e.startswith("data: {") for e in events), events  # no [DONE], no scraps
            documents = [json.loads(e.removeprefix("data: ")) for e in events]
            error = documents[-1]["error"]
            assert WORDS[flavor] in error["message"]
            assert all("error" not in d for d in documents[:-1])
        ended(d.scheduler)


@pytest.mark.parametrize("flavor", ["llamacpp", "mlx"])
async def test_the_openai_client_gets_an_api_error_with_the_words(flavor: Flavor) -> None:
    faults = FakeServerFaults(stream_tokens=5, cut_stream_after=CUTS[-1])
    async with open_fake_server(flavor=flavor, faults=faults) as server:
        async with door(entry_for("m", server)) as d:
            said, error = await trio.to_thread.run_sync(_openai_stream, d.url)
        ended(d.scheduler)
    assert isinstance(error, openai.APIError), repr(error)
    assert WORDS[flavor] in str(error)
    assert "'m'" in str(error)
    assert set("".join(said)) <= set(TOKEN)


def _ollama_generate(host: str, model: str) -> tuple[list[str], Exception]:
    said: list[str] = []
    with ollama.Client(host=host) as client:
        try:
            for part in client.generate(model=model, prompt="the cat", stream=True):
                assert not part.done, "a cut stream must never say done"
                said.append(part.response)
        except Exception as error:  # the test says which kind it must be
            return said, error
    raise AssertionError("the cut stream ended without an error")


@pytest.mark.parametrize("cut", [30, 120, 200])
async def test_an_ollama_ndjson_stream_cut_inside_a_line_ends_with_an_error_line(
    cut: int,
) -> None:
    async with open_fake_ollama(models=("tiny:latest",), cut_stream_after=cut) as fake:
        body = {"model": "tiny:latest", "prompt": "the cat"}  # as the door sends it
        raw = await _raw_from(fake.base_url, "/api/generate", body)
        assert raw
        assert not raw.endswith(b"\n"), "the fault must cut inside a line"
        entry = ModelEntry("tiny", (), InferFlavor.OLLAMA, Residency.RESIDENT, on_demand=False)
        upstream = Upstream("tiny", InferFlavor.OLLAMA, fake.base_url, "tiny:latest")
        async with door((entry, upstream)) as d:
            said, error = await trio.to_thread.run_sync(_ollama_generate, d.url, "tiny")
        ended(d.scheduler)
    assert isinstance(error, ollama.ResponseError), repr(error)
    assert "broke off" in error.error
    assert "'tiny'" in error.error
    whole = [json.loads(line)["response"] for line in raw.split(b"\n")[:-1]]
    assert said == whole  # every whole line passed on, the cut one dropped


async def test_the_ollama_client_of_a_translated_stream_cut_inside_an_event() -> None:
    faults = FakeServerFaults(stream_tokens=5, cut_stream_after=CUTS[-1])
    async with open_fake_server(faults=faults) as server:
        async with door(entry_for("m", server)) as d:
            said, error = await trio.to_thread.run_sync(_ollama_generate, d.url, "m")
        ended(d.scheduler)
    assert isinstance(error, ollama.ResponseError), repr(error)
    assert "broke off" in error.error
    assert set("".join(said)) <= set(TOKEN)


async def test_a_partial_frame_longer_than_the_reply_limit_ends_the_stream() -> None:
    """What is held of a frame is bounded: past `ReplyLimits.max_bytes`, the stream ends."""
    limits = FrontDoorLimits(reply=ReplyLimits(max_bytes=20))
    faults = FakeServerFaults(stream_tokens=5, cut_stream_after=CUTS[-1])
    async with open_fake_server(faults=faults) as server:
        scheduler = ResidentScheduler([entry_for("m", server)])
        clients = UpstreamClients()
        app = front_door_app(scheduler, clients=clients, limits=limits)
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                answer = await c.post("/v1/chat/completions", json={"model": "m", **CHAT})
        finally:
            await clients.aclose()
    events = [e.removeprefix("data: ") for e in answer.text.split("\n\n") if e]
    error = json.loads(events[-1])["error"]["message"]
    assert "an event of its stream is longer than 20 bytes" in error
    assert all(TOKEN in e for e in events[1:-1])  # the whole events before it passed on
    ended(scheduler)
