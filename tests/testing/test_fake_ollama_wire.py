"""The fake Ollama's wire format over real loopback sockets, read by the official ``ollama``
Python client and by a separate ``python -m inferactors.testing.fake_ollama`` process
(issue 4 item 5; server-apis.md section 3; FC-18). Its bookkeeping and behaviour under
MockClock are ``test_fake_ollama.py``.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import httpx
import ollama
import pytest
import trio
import trio.testing

from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama
from testing.fake_ollama_support import RUNNER_TIMEOUT, generate

# --- the wire format over real sockets -------------------------------------------------------


def official(fake: FakeOllama) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=fake.base_url, trust_env=False, timeout=30.0)


async def test_the_official_client_reads_tags_and_ps() -> None:
    async with (
        open_fake_ollama(models=("tiny",), preloaded=("other:7b",)) as fake,
        official(fake) as client,
    ):
        listed = await client.list()
        running = await client.ps()
    assert [m.model for m in listed.models] == ["tiny:latest", "other:7b"]
    assert listed.models[0].details is not None
    assert listed.models[0].details.format == "gguf"
    assert isinstance(listed.models[0].modified_at, datetime)
    assert [(m.name, m.model) for m in running.models] == [("other:7b", "other:7b")]
    assert running.models[0].expires_at is not None
    assert running.models[0].expires_at.year > 2300
    assert running.models[0].size_vram == running.models[0].size


async def test_the_official_client_loads_generates_and_unloads() -> None:
    async with open_fake_ollama(models=("tiny",)) as fake, official(fake) as client:
        loaded = await client.generate(model="tiny", prompt="", keep_alive=-1)
        assert (loaded.done, loaded.done_reason) == (True, "load")
        assert [m.name for m in (await client.ps()).models] == ["tiny:latest"]
        answer = await client.generate(model="tiny", prompt="hi", options={"num_predict": 1})
        assert (answer.response, answer.done_reason, answer.eval_count) == ("Hello", "length", 1)
        streamed = [
            part.response async for part in await client.generate("tiny", "hi", stream=True)
        ]
        assert "".join(streamed) == "Hello from the fake Ollama."
        await client.generate(model="tiny", prompt="hi", keep_alive="5m")  # a foreign client
        expiry = (await client.ps()).models[0].expires_at
        assert expiry is not None
        assert expiry - datetime.now(UTC) < timedelta(minutes=6)
        unloaded = await client.generate(model="tiny", keep_alive=0)
        assert unloaded.done_reason == "unload"
        assert (await client.ps()).models == []
    generates = [r.json for r in fake.requests if r.path == "/api/generate"]
    assert generates[0] == {"model": "tiny", "prompt": "", "keep_alive": -1, "stream": False}


async def test_the_official_client_sees_errors_with_status() -> None:
    async with (
        open_fake_ollama(models=("tiny",), load_error=RUNNER_TIMEOUT) as fake,
        official(fake) as client,
    ):
        with pytest.raises(ollama.ResponseError) as missing:
            await client.generate(model="nope", prompt="")
        with pytest.raises(ollama.ResponseError) as timed_out:
            await client.generate(model="tiny", prompt="")
    assert (missing.value.status_code, missing.value.error) == (404, "model 'nope' not found")
    assert (timed_out.value.status_code, timed_out.value.error) == (500, RUNNER_TIMEOUT)


async def test_a_disconnect_during_a_real_load_aborts_it() -> None:
    """FC-18 over a real socket: the fake notices the closed connection and drops the load."""
    async with open_fake_ollama(models=("tiny",), load_delay_s=60.0) as fake:
        async with httpx.AsyncClient(base_url=fake.base_url, trust_env=False) as http:
            with trio.move_on_after(0.5):
                await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
        with trio.fail_after(10):
            while fake.resident():  # noqa: ASYNC110  polling what a real socket lets us see
                await trio.sleep(0.05)
        assert "tiny:latest" not in fake.book.runners


async def test_head_and_version_over_http() -> None:
    async with (
        open_fake_ollama(version="0.9.9") as fake,
        httpx.AsyncClient(base_url=fake.base_url, trust_env=False) as http,
    ):
        head = await http.head("/")
        version = await http.get("/api/version")
    assert (head.status_code, head.content) == (200, b"")
    assert version.json() == {"version": "0.9.9"}


def test_the_command_line_serves_a_fake_ollama(free_port: int) -> None:
    argv = [sys.executable, "-m", "inferactors.testing.fake_ollama", "--port", str(free_port)]
    argv += ["--model", "tiny", "--preloaded", "other:7b", "--unload-linger", "0.5"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == f"fake ollama listening on http://127.0.0.1:{free_port}"
        with httpx.Client(base_url=f"http://127.0.0.1:{free_port}", trust_env=False) as http:
            names = [m["name"] for m in http.get("/api/tags").json()["models"]]
            resident = [m["name"] for m in http.get("/api/ps").json()["models"]]
        assert names == ["tiny:latest", "other:7b"]
        assert resident == ["other:7b"]
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
