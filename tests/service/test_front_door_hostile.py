"""Hostile and broken clients at the front door: each gets a clear 4xx in its dialect,
naming what is wrong, and disturbs no other request."""

from __future__ import annotations

import gzip
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from inferactors._config.front_door import FrontDoorConfig
from inferactors.testing._fake_replies import TOKEN
from service.front_door_support import door, ended, entry_for, fake

SMALL = FrontDoorConfig(port=0, max_body_bytes=1000, body_timeout_s=0.5)


@pytest.mark.parametrize(
    ("content", "headers", "status", "words"),
    [
        (b"{bad", {}, 400, "not valid JSON: JSON syntax error at line 1, column 2"),
        (b"[1, 2]", {}, 400, "$: expected a JSON object, got list"),
        (b'{"model": "m", "model": "m"}', {}, 400, 'the key "model" twice'),
        (b"[" * 100 + b"]" * 100, {}, 400, "nested deeper than 64"),
        (b"", {}, 400, "the request body is empty"),
        (b'{"model": 7}', {}, 400, "$.model: expected a string, got 7"),
        (b'{"model": ["m"]}', {}, 400, "$.model: expected a string"),
        (b'{"prompt": "x"}', {}, 400, '$.model: name the model to use (one of "m")'),
        (b'{"model": "m"}', {"content-type": "text/plain"}, 415, "'text/plain' is not JSON"),
        (
            b'{"model": "m", "max_tokens": 1e999}',
            {},
            400,
            "$.max_tokens: 1e999 is not a finite JSON number",
        ),
        (b"x" * 2000, {}, 413, "too large (2000 bytes declared; at most 1000 bytes)"),
    ],
)
async def test_a_bad_body_is_a_4xx_naming_what_is_wrong(
    tmp_path: Path, content: bytes, headers: dict[str, str], status: int, words: str
) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=SMALL) as d, httpx.AsyncClient() as client:
            headers = {"content-type": "application/json", **headers}
            openai_answer = await client.post(
                d.url + "/v1/completions", content=content, headers=headers
            )
            ollama_answer = await client.post(
                d.url + "/api/generate", content=content, headers=headers
            )
    assert openai_answer.status_code == status
    assert ollama_answer.status_code == status
    assert words in openai_answer.json()["error"]["message"]
    assert words in ollama_answer.json()["error"]
    assert not d.scheduler.granted  # refused before any instance was asked


async def test_a_body_larger_than_allowed_without_a_length_is_refused_as_read(
    tmp_path: Path,
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"x" * 100

    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=SMALL) as d, httpx.AsyncClient() as client:
            answer = await client.post(d.url + "/v1/completions", content=body())
    assert answer.status_code == 413
    assert "more than 1000 bytes sent" in answer.text


@pytest.mark.parametrize("path", ["/v1/completions", "/completion", "/api/generate"])
async def test_a_compressed_body_is_a_415_naming_its_content_encoding(
    tmp_path: Path, path: str
) -> None:
    content = gzip.compress(b'{"model": "m", "prompt": "x"}')
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient() as client:
            answer = await client.post(d.url + path, content=content, headers=headers)
    assert answer.status_code == 415, answer.text
    error = answer.json()["error"]
    message = error if path.startswith("/api/") else error["message"]
    assert "Content-Encoding 'gzip' is not accepted" in message, message
    assert not d.scheduler.granted


async def test_curl_form_type_is_read_as_json(tmp_path: Path) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient() as client:
            answer = await client.post(
                d.url + "/api/generate",
                content=b'{"model": "m", "prompt": "x", "stream": false}',
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
    assert answer.status_code == 200
    assert answer.json()["response"] == TOKEN


async def _slowloris(port: int, sent: list[bytes]) -> None:
    """A client that sends its head, then one byte of its body every 0.1 s until answered."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream, trio.open_nursery() as nursery:

        async def trickle() -> None:
            head = (
                b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
            )
            await stream.send_all(head)
            for _ in range(100):
                await stream.send_all(b" ")
                await trio.sleep(0.1)

        nursery.start_soon(trickle)
        answer = b""
        with trio.fail_after(5.0):
            while not answer.endswith(b"}"):
                answer += await stream.receive_some(4096)
        sent.append(answer)
        nursery.cancel_scope.cancel()


async def test_a_slowloris_body_gets_408_and_others_are_served_meanwhile(tmp_path: Path) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=SMALL) as d, httpx.AsyncClient() as client:
            sent: list[bytes] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_slowloris, d.door.port, sent)
                for _ in range(3):
                    with trio.fail_after(2.0):
                        answer = await client.post(
                            d.url + "/v1/completions", json={"model": "m", "prompt": "x"}
                        )
                    assert answer.status_code == 200
    assert sent
    assert sent[0].startswith(b"HTTP/1.1 408")
    assert b"did not arrive within 0.5 s" in sent[0]
    ended(d.scheduler)


async def test_unknown_routes_and_methods_answer_in_the_dialect(tmp_path: Path) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(base_url=d.url) as client:
            missing = await client.get("/api/nope")
            wrong = await client.get("/v1/chat/completions")
            native = await client.put("/completion")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no route /api/nope"}
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    assert native.status_code == 405
    assert "PUT is not allowed" in native.json()["error"]["message"]


async def test_with_an_api_key_every_request_needs_it(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("front-door-key-0123456789\n")
    os.chmod(key_file, 0o600)
    config = FrontDoorConfig(port=0, api_key_file=key_file)
    with fake(tmp_path / "fake") as server:
        async with door(entry_for("m", server), config=config) as d, httpx.AsyncClient() as client:
            body = {"model": "m", "prompt": "x"}
            without = await client.post(d.url + "/v1/completions", json=body)
            wrong = await client.get(d.url + "/api/tags", headers={"Authorization": "Bearer no"})
            right = await client.post(
                d.url + "/v1/completions",
                json=body,
                headers={"Authorization": "bearer front-door-key-0123456789"},
            )
    assert without.status_code == 401
    assert without.json()["error"]["type"] == "authentication_error"
    assert wrong.status_code == 401
    assert "Invalid API Key" in wrong.json()["error"]
    assert right.status_code == 200
    assert d.scheduler.granted["m"] == 1
