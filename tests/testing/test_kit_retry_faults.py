"""The faults a retrying client needs, played by a fake from `open_fake_server` and met by
real clients (httpx, the official OpenAI client): an error status for completions N..M, a
connection reset at completion K, a body or a stream cut after N bytes, gaps between tokens.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import httpx
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from inferactors.testing import FakeServer, FakeServerFaults, Timeline, open_fake_server
from inferactors.testing._fake_faults import parse_fake_server_args

CHAT = "/v1/chat/completions"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
ASK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


async def _ask(client: httpx.AsyncClient, fake: FakeServer) -> httpx.Response:
    return await client.post(fake.base_url + CHAT, json=ASK)


def _completions(fake: FakeServer) -> int:
    return sum(1 for request in fake.requests() if request.path == CHAT)


async def _read_raw(client: httpx.AsyncClient, url: str, got: bytearray) -> None:
    async with client.stream("POST", url, json=ASK) as response:
        assert response.status_code == 200
        async for part in response.aiter_raw():
            got += part


async def _read_lines(client: httpx.AsyncClient, url: str, lines: list[str]) -> None:
    async with client.stream("POST", url, json={**ASK, "stream": True}) as response:
        async for line in response.aiter_lines():
            lines.append(line)


def _openai(fake: FakeServer, retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url + "/v1", api_key="x", max_retries=retries)


def _chat(fake: FakeServer, retries: int) -> str:
    """One chat completion through the OpenAI client (sync: run it in a thread)."""
    with _openai(fake, retries) as client:  # closed: no socket left to the collector
        reply = client.chat.completions.create(model="tiny", messages=MESSAGES)
    return reply.choices[0].message.content or ""


def test_the_retry_faults_are_flags_that_read_back() -> None:
    faults = FakeServerFaults(
        fail_status=429, fail_from=2, fail_to=3, reset_at=4, cut_at=5, cut_body_after=7,
        cut_stream_after=9,
    )  # fmt: skip
    assert parse_fake_server_args(["--port", "1", *faults.args()]).faults == faults
    with pytest.raises(ValueError, match="fail_status"):
        FakeServerFaults(fail_status=200)  # not an error status


@pytest.mark.parametrize("status", [503, 429, 500])
async def test_an_error_status_for_completions_n_to_m(status: int) -> None:
    faults = FakeServerFaults(fail_status=status, fail_from=2, fail_to=3)
    async with open_fake_server(faults=faults) as fake, httpx.AsyncClient() as client:
        statuses = [(await _ask(client, fake)).status_code for _ in range(4)]
        failed = await client.post(fake.base_url + CHAT, json=ASK)  # the 5th: served
        health = await client.get(fake.base_url + "/health")  # not a completion: not counted
    assert statuses == [200, status, status, 200]
    assert failed.status_code == 200
    assert health.status_code == 200


async def test_the_openai_client_retries_past_a_503_and_tells_a_429_after_its_retries() -> None:
    async with open_fake_server(faults=FakeServerFaults(fail_status=503, fail_to=1)) as fake:
        reply = await trio.to_thread.run_sync(lambda: _chat(fake, 2))
        assert reply
        assert _completions(fake) == 2  # one 503, then the answer
    async with open_fake_server(faults=FakeServerFaults(fail_status=429)) as fake:
        with pytest.raises(openai.RateLimitError) as raised:
            await trio.to_thread.run_sync(lambda: _chat(fake, 1))
        assert raised.value.status_code == 429
        assert "Too Many Requests" in str(raised.value)
        assert _completions(fake) == 2  # the first try and its one retry


async def test_a_connection_reset_at_completion_k() -> None:
    async with open_fake_server(faults=FakeServerFaults(reset_at=2)) as fake:
        async with httpx.AsyncClient() as client:
            assert (await _ask(client, fake)).status_code == 200
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                await _ask(client, fake)
            assert (await _ask(client, fake)).status_code == 200
        reply = await trio.to_thread.run_sync(lambda: _chat(fake, 0))
        assert reply  # the 4th: served
    async with open_fake_server(faults=FakeServerFaults(reset_at=1)) as fake:
        with pytest.raises(openai.APIConnectionError):
            await trio.to_thread.run_sync(lambda: _chat(fake, 0))


async def test_a_body_cut_after_n_bytes() -> None:
    faults = FakeServerFaults(cut_at=1, cut_body_after=25)
    async with open_fake_server(faults=faults) as fake, httpx.AsyncClient() as client:
        got = bytearray()
        with pytest.raises(httpx.RemoteProtocolError, match=r"incomplete|closed"):
            await _read_raw(client, fake.base_url + CHAT, got)
        assert len(got) == 25
        assert got.startswith(b'{"')  # the start of the JSON answer
        whole = await _ask(client, fake)  # completion 2 is whole
        assert whole.json()["choices"][0]["message"]["content"]
        assert len(whole.content) > 25


async def test_the_openai_client_retries_a_cut_body() -> None:
    faults = FakeServerFaults(cut_at=1, cut_body_after=10)
    async with open_fake_server(faults=faults) as fake:
        reply = await trio.to_thread.run_sync(lambda: _chat(fake, 1))
        assert reply
        assert _completions(fake) == 2


async def test_a_stream_cut_after_n_bytes_ends_with_an_error_not_a_finish() -> None:
    faults = FakeServerFaults(stream_tokens=5, cut_at=1, cut_stream_after=300)
    ask = {**ASK, "stream": True}
    async with open_fake_server(faults=faults) as fake, httpx.AsyncClient() as client:
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            await _read_lines(client, fake.base_url + CHAT, lines)
        events = [line for line in lines if line.startswith("data: ")]
        assert events  # some of the answer came
        assert "data: [DONE]" not in lines
        async with client.stream("POST", fake.base_url + CHAT, json=ask) as response:
            whole = [line async for line in response.aiter_lines() if line.startswith("data: ")]
        assert whole[-1] == "data: [DONE]"
    async with open_fake_server(faults=faults) as fake:

        def read_stream() -> list[str]:
            said = []
            with _openai(fake, 0) as client:
                stream = client.chat.completions.create(
                    model="tiny", messages=MESSAGES, stream=True
                )
                with stream:
                    for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            said.append(chunk.choices[0].delta.content)
            return said

        with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
            await trio.to_thread.run_sync(read_stream)


async def test_gaps_between_tokens_trip_a_read_timeout_and_pass_a_patient_client() -> None:
    faults = FakeServerFaults(stream_tokens=4, stream_token_delay_s=0.4)
    ask = {**ASK, "stream": True}
    async with open_fake_server(faults=faults) as fake:
        hasty = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=0.1))
        async with hasty:
            seen: list[str] = []
            with pytest.raises(httpx.ReadTimeout):
                await _read_lines(hasty, fake.base_url + CHAT, seen)
            assert any('"content"' in line for line in seen)  # the first token came
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=2.0)) as patient:
            arrivals: list[float] = []
            async with patient.stream("POST", fake.base_url + CHAT, json=ask) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0].get(
                        "delta", {}
                    ).get("content"):
                        arrivals.append(time.monotonic())
    assert len(arrivals) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert min(gaps) >= 0.35, gaps  # each token waited for its pause


async def test_open_fake_server_stops_it_on_exit_and_refuses_faults_with_a_timeline(
    tmp_path: Path,
) -> None:
    async with open_fake_server(directory=tmp_path / "fake") as fake, httpx.AsyncClient() as client:
        assert (await client.get(fake.base_url + "/health")).json() == {"status": "ok"}
    assert fake.returncode() is not None  # killed and reaped
    assert (tmp_path / "fake" / "requests.jsonl").is_file()
    with pytest.raises(ValueError, match="not both"):
        async with open_fake_server(faults=FakeServerFaults(), timeline=Timeline()):
            pass
