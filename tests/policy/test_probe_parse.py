"""Tests of the probe's pure reply parsing (``_policy/probe_parse.py``; server-apis.md 1 to
3): how an HTTP status and body classify health for llama-server, mlx_lm.server and Ollama,
which model ids a list names, and what the tiny completion sends and reads back.

The sample replies come from ``probe_replies_support.py`` beside this file, which the
probe's client tests in ``tests/edges`` serve too.
"""

from __future__ import annotations

import json

import pytest

from inferactors._errors import BackendError
from inferactors._policy.probe_parse import (
    classify_health,
    classify_models_status,
    classify_ollama_version,
    completion_body,
    model_list_problem,
    parse_completion,
    parse_model_ids,
    parse_ollama_version,
)
from inferactors._policy.probe_report import Loading, Unhealthy, Up
from policy.probe_replies_support import COMPLETION, LLAMA_LOADING, LLAMA_MODELS, OLLAMA_TAGS


@pytest.mark.parametrize(
    ("status", "health"),
    [
        (200, Up()),
        (503, Loading()),
        (404, None),
        (501, None),
        (302, Unhealthy("/health returned HTTP 302")),
        (500, Unhealthy("/health returned HTTP 500")),
        (401, Unhealthy("/health returned HTTP 401")),
    ],
)
def test_classify_health(status: int, health: object) -> None:
    assert classify_health(status) == health


def test_classify_health_reads_llama_and_old_llama_503_bodies_as_loading() -> None:
    assert classify_health(503, json.dumps(LLAMA_LOADING).encode()) == Loading()
    assert classify_health(503, b'{"status":"loading model"}') == Loading()
    assert classify_health(503, b"<html>not json</html>") == Loading()


def test_mlx_dead_generation_thread_503_is_unhealthy_not_loading() -> None:
    health = classify_health(503, b'{"status": "unavailable"}')
    assert isinstance(health, Unhealthy)
    assert "HTTP 503" in health.why


@pytest.mark.parametrize(
    ("status", "health"),
    [
        (200, Up()),
        (503, Loading()),
        (501, Up()),
        (500, Unhealthy("/v1/models returned HTTP 500")),
    ],
)
def test_classify_models_status(status: int, health: object) -> None:
    assert classify_models_status(status) == health


@pytest.mark.parametrize(
    ("status", "health"),
    [(200, Up()), (503, Loading()), (404, Unhealthy("/api/version returned HTTP 404"))],
)
def test_classify_ollama_version(status: int, health: object) -> None:
    assert classify_ollama_version(status) == health


@pytest.mark.parametrize(
    ("body", "ids"),
    [
        (json.dumps(LLAMA_MODELS).encode(), ("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",)),
        (b'{"object":"list","data":[{"id":"tiny","object":"model","meta":null}]}', ("tiny",)),
        (
            b'{"object":"list","data":[{"id":"/abs/dir","object":"model","created":1}]}',
            ("/abs/dir",),
        ),
        (json.dumps(OLLAMA_TAGS).encode(), ("llama3.2:latest", "qwen2.5:0.5b")),
        (b'{"object":"list","data":[]}', ()),
        (b'{"data":[{"id":7},{"object":"model"},"x",{"id":"ok"}]}', ("ok",)),
        (b"", ()),
        (b"not json", ()),
        (b"[1, 2]", ()),
        (b"\xff\xfe", ()),
    ],
)
def test_parse_model_ids(body: bytes, ids: tuple[str, ...]) -> None:
    assert parse_model_ids(body) == ids


def test_parse_ollama_version() -> None:
    assert parse_ollama_version(b'{"version":"0.5.1"}') == "0.5.1"
    assert parse_ollama_version(b'{"version":5}') is None
    assert parse_ollama_version(b"") is None


def test_completion_body_without_model_has_no_model_field() -> None:
    assert completion_body(None) == {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "stream": False,
    }


def test_completion_body_with_model_names_it() -> None:
    body = completion_body("/abs/tiny-mlx")
    assert body["model"] == "/abs/tiny-mlx"
    assert body["max_tokens"] == 1


def test_parse_completion_reads_text_and_finish_reason() -> None:
    assert parse_completion(200, json.dumps(COMPLETION).encode()) == (" and", "length")


def test_parse_completion_accepts_reasoning_content_when_content_is_null() -> None:
    message = {"role": "assistant", "content": None, "reasoning_content": "<think>"}
    body = json.dumps({"choices": [{"message": message, "finish_reason": None}]}).encode()
    assert parse_completion(200, body) == ("<think>", None)


def test_parse_completion_non_200_quotes_the_first_200_chars() -> None:
    body = b'{"error": "generation thread died"}' + b"x" * 500
    with pytest.raises(BackendError) as caught:
        parse_completion(404, body)
    message = str(caught.value)
    assert message.startswith('deep health: completion returned HTTP 404: {"error": "generation')
    assert message.endswith("x" * (200 - 35))
    assert len(message) == len("deep health: completion returned HTTP 404: ") + 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"<html>oops</html>", "not a JSON object"),
        (b'{"object":"chat.completion"}', "choices[0]"),
        (b'{"choices":[]}', "choices[0]"),
        (b'{"choices":[{"finish_reason":"stop"}]}', "choices[0].message"),
        (b'{"choices":[{"message":{"content":7}}]}', "choices[0].message.content"),
        (b'{"choices":[{"message":{"role":"assistant"}}]}', "choices[0].message.content"),
    ],
)
def test_parse_completion_malformed_body_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(BackendError, match=r"^deep health: completion body") as caught:
        parse_completion(200, body)
    assert field in str(caught.value)


@pytest.mark.parametrize("status", [404, 501])
def test_a_server_without_a_model_list_route_has_nothing_to_confirm(status: int) -> None:
    """An mlx_lm.server from before its model list answers 501 ``Unsupported method
    ('GET')``: no list to read is not an unreadable list."""
    body = b"<html><body><h1>Error response</h1>Unsupported method ('GET')</body></html>"
    assert model_list_problem("/v1/models", status, body) is None
    assert model_list_problem("/v1/models", 500, body) == (
        "model list unreadable: /v1/models returned HTTP 500"
    )
