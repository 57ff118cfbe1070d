"""The real ``openai`` client retries a 5xx by itself (twice by default) unless the answer
says ``x-should-retry: false``. A 5xx of the front door after the request may have reached
the server says ``false``, so the server reads the request once (a retry would run the
generation again); one where nothing reached a server says ``true``, and the client's
retries go on. The servers are played on a real socket (tests/edges/closing_server.py),
which counts the requests it read."""

from __future__ import annotations

from functools import partial

import httpx
import openai
import pytest
import trio

from edges.closing_server import open_closing_server
from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._flavor import InferFlavor
from inferactors.testing._fake_processes import free_port
from service.front_door_support import door, ended

RETRIES = 2


def _model(base_url: str) -> tuple[ModelEntry, Upstream]:
    entry = ModelEntry("m", (), InferFlavor.LLAMACPP, Residency.RESIDENT, on_demand=False)
    return entry, Upstream("m", InferFlavor.LLAMACPP, base_url, "")


def _chat(url: str, retries: int) -> openai.APIStatusError:
    """What the openai client raises for one chat completion through the door at ``url``."""
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=retries) as client:
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        except openai.APIStatusError as error:
            return error
    raise AssertionError("the chat completion succeeded")


@pytest.mark.parametrize(
    ("play", "words"),
    [
        ("read-then-close", "did not answer the request"),
        ("head-then-close", "its answer broke off"),
    ],
)
async def test_a_request_the_server_read_is_sent_once_by_the_openai_client(
    play: str, words: str
) -> None:
    async with (
        open_closing_server([play] * (RETRIES + 1)) as server,
        door(_model(server.base_url)) as d,
    ):
        error = await trio.to_thread.run_sync(partial(_chat, d.url, RETRIES))
    assert [method for _, method, _ in server.read] == ["POST"]  # never again
    assert error.status_code == 502
    assert error.response.headers["x-should-retry"] == "false"
    assert words in error.message
    ended(d.scheduler)


async def test_a_request_no_server_got_is_still_retried_by_the_openai_client() -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with door(_model(nobody)) as d:
        error = await trio.to_thread.run_sync(partial(_chat, d.url, 1))
    assert error.status_code == 502
    assert error.response.headers["x-should-retry"] == "true"
    assert "cannot be reached" in error.message
    assert d.scheduler.granted["m"] == 2  # the first try and the client's one retry
    ended(d.scheduler)


async def test_an_ollama_request_the_server_read_says_no_retry() -> None:
    """The translated answer (an Ollama client's request to llama-server) says it too."""
    async with (
        open_closing_server(["head-then-close"]) as server,
        door(_model(server.base_url)) as d,
        httpx.AsyncClient() as client,
    ):
        body = {"model": "m", "prompt": "hi", "stream": False}
        answer = await client.post(d.url + "/api/generate", json=body)
    assert answer.status_code == 502
    assert answer.headers["x-should-retry"] == "false"
    assert "its answer broke off" in answer.json()["error"]
    assert len(server.read) == 1
    ended(d.scheduler)
