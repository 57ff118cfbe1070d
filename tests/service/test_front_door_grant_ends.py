"""A grant is ended exactly once on every path out of a request, whatever fails after it
was given: an unexpected exception is injected at each step that follows the grant (the
body re-encoded for the server, the Ollama translation out and back, the answer object,
the relay to the server, the answer passed on), and each time the client gets an answer
that says what failed (a 500 in its dialect, or a stream that does not end cleanly), the
model's requests in flight come back to 0, and the next request is served (real front
door over HTTP, fake servers, httpx).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferactors._edges.upstream import UpstreamClients
from inferactors._policy.model_echo import echo_model
from inferactors._policy.ollama_replies import StreamTranslation
from inferactors._service import (
    front_door_ollama,
    front_door_relay,
    front_door_steps,
    front_door_translate,
)
from service.front_door_support import door, ended, entry_for, fake

# A stream cut short leaves httpx's and httpcore's async generators unexhausted
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Injected(Exception):
    """The fault put in a step."""


def _once(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``, which raises `Injected` the first time it is called."""
    calls = [0]

    def step(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise Injected("the step broke, as the test made it")
        return original(*args, **kwargs)

    return step


def _once_async(original: Callable[..., Any]) -> Callable[..., Any]:
    calls = [0]

    async def step(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise Injected("the step broke, as the test made it")
        return await original(*args, **kwargs)

    return step


STEPS: dict[str, tuple[Any, str, bool]] = {
    # name: (module or class, attribute, async)
    "re-encode for the server": (front_door_steps, "_with_model", False),
    "the answer object": (front_door_relay.PassThrough, "__init__", False),
    "Ollama translation out": (front_door_ollama, "dump_json", False),
    "Ollama answer object": (front_door_translate.Translated, "__init__", False),
    "relay to the server": (UpstreamClients, "open", True),
    "whole answer passed on": (front_door_relay, "echo_model", False),
    "Ollama answer translated back": (front_door_translate, "chat_reply", False),
}

ROUTES = {
    "re-encode for the server": "/v1/chat/completions",
    "the answer object": "/v1/chat/completions",
    "Ollama translation out": "/api/chat",
    "Ollama answer object": "/api/chat",
    "relay to the server": "/v1/chat/completions",
    "whole answer passed on": "/v1/chat/completions",
    "Ollama answer translated back": "/api/chat",
}


def _message(path: str, answer: httpx.Response) -> str:
    error = answer.json()["error"]
    return str(error if path.startswith("/api/") else error["message"])


@pytest.mark.parametrize("step", sorted(STEPS))
async def test_a_fault_after_the_grant_ends_it_and_says_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    owner, name, is_async = STEPS[step]
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, (_once_async if is_async else _once)(original))
    path = ROUTES[step]
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(timeout=20) as client:
            failed = await client.post(d.url + path, json={"model": "m", "stream": False, **CHAT})
            in_flight = d.scheduler.in_flight["m"]
            served = await client.post(d.url + path, json={"model": "m", "stream": False, **CHAT})
    assert failed.status_code == 500, failed.text
    assert failed.headers["x-should-retry"] == "false"
    message = _message(path, failed)
    assert "Injected: the step broke, as the test made it" in message, message
    assert in_flight == 0
    assert served.status_code == 200, served.text
    assert d.scheduler.granted["m"] == 2
    ended(d.scheduler)


async def _read_stream(client: httpx.AsyncClient, url: str) -> None:
    body = {"model": "m", "stream": True, **CHAT}
    async with client.stream("POST", url, json=body) as streamed:
        async for _ in streamed.aiter_raw():
            pass


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_a_fault_mid_stream_ends_the_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "/api/chat":
        monkeypatch.setattr(StreamTranslation, "feed", _once(StreamTranslation.feed))
    else:
        monkeypatch.setattr(front_door_relay, "echo_model", _once(echo_model))
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(timeout=20) as client:
            with pytest.raises(httpx.RemoteProtocolError):  # cut: no clean end of the stream
                await _read_stream(client, d.url + path)
            in_flight = d.scheduler.in_flight["m"]
            served = await client.post(d.url + path, json={"model": "m", "stream": True, **CHAT})
    assert in_flight == 0
    assert served.status_code == 200
    ended(d.scheduler)
