"""The real ``openai`` and ``ollama`` Python clients through the front door, against fake
llama-server and mlx_lm.server processes: whole answers and streams, errors in each
client's own exception, and every grant ended exactly once.

The clients are the blocking ones, run in a worker thread, as most applications use them
(their async clients leave async generators for trio's finalizer when a stream ends).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import ollama
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from inferactors.testing._fake_replies import TOKEN
from service.front_door_support import door, ended, entry_for, fake

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "the cat"}]


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def _openai_session(url: str, models: tuple[str, ...]) -> list[str]:
    """What each model says, whole then streamed, through the openai client."""
    said = []
    with _openai(url) as client:
        for model in models:
            answer = client.chat.completions.create(model=model, messages=USER, max_tokens=1)
            said.append(answer.choices[0].message.content or "")
            stream = client.chat.completions.create(
                model=model,
                messages=USER,
                max_tokens=1,
                stream=True,
            )
            with stream:
                parts = [c.choices[0].delta.content for c in stream if c.choices]
            said.append("".join(p for p in parts if p))
        said.append(
            client.completions.create(model=models[0], prompt="x", max_tokens=1).choices[0].text
        )
        said.append(",".join(m.id for m in client.models.list().data))
    return said


async def test_openai_client_chat_completion_and_stream(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        models = (entry_for("chat", llama, aliases=("tiny",)), entry_for("small", mlx))
        async with door(*models) as d:
            said = await trio.to_thread.run_sync(_openai_session, d.url, ("chat", "tiny", "small"))
        assert said == [TOKEN] * 7 + ["chat,small"]
        assert d.scheduler.granted["chat"] == 5
        assert d.scheduler.granted["small"] == 2
        ended(d.scheduler)
        # mlx_lm.server got its own --model as "model", never the front door's name
        bodies = [r.body for r in mlx.requests() if r.path == "/v1/chat/completions"]
        assert len(bodies) == 2
        assert all('"model":"/models/tiny-mlx"' in body for body in bodies)


def _models_named(url: str, model: str) -> list[str]:
    """The ``model`` each answer names: whole and streamed chat, whole completion."""
    with _openai(url) as client:
        whole = client.chat.completions.create(model=model, messages=USER, max_tokens=1)
        stream = client.chat.completions.create(
            model=model, messages=USER, max_tokens=1, stream=True
        )
        with stream:
            chunks = [chunk.model for chunk in stream]
        text = client.completions.create(model=model, prompt="x", max_tokens=1)
    return [whole.model, *chunks, text.model]


async def test_openai_answers_name_the_model_asked_for_never_the_servers_path(
    tmp_path: Path,
) -> None:
    with fake(tmp_path / "mlx", "mlx") as mlx:
        async with door(entry_for("small", mlx, aliases=("tiny-alias",))) as d:
            named = await trio.to_thread.run_sync(_models_named, d.url, "small")
            aliased = await trio.to_thread.run_sync(_models_named, d.url, "tiny-alias")
        sent = [r for r in mlx.requests() if r.path == "/v1/chat/completions"]
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                mlx.base_url + "/v1/chat/completions", json={"messages": USER}
            )
    assert '"/models/tiny-mlx"' in answer.text  # what the server itself names
    assert len(named) >= 3
    assert set(named) == {"small"}
    assert set(aliased) == {"tiny-alias"}
    assert sent
    ended(d.scheduler)


def _openai_errors(url: str) -> list[Exception]:
    seen: list[Exception] = []
    with _openai(url) as client:
        for model, messages in (("nope", USER), ("chat", "x")):
            try:
                client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
            except openai.APIStatusError as error:
                seen.append(error)
    return seen


async def test_openai_client_errors_are_its_own_exceptions(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama:
        async with door(entry_for("chat", llama)) as d:
            missing, bad = await trio.to_thread.run_sync(_openai_errors, d.url)
        assert isinstance(missing, openai.NotFoundError)
        assert "'nope' not found" in str(missing)
        assert '"chat"' in str(missing)
        assert isinstance(bad, openai.BadRequestError)
        assert "messages" in str(bad)
        ended(d.scheduler)


def _ollama_session(url: str, model: str) -> dict[str, object]:
    with ollama.Client(host=url) as client:
        return _ollama_said(client, model)


def _ollama_said(client: ollama.Client, model: str) -> dict[str, object]:
    answer = client.chat(model=model, messages=USER)
    parts = list(client.chat(model=model, messages=USER, stream=True))
    generated = client.generate(model=model, prompt="the cat")
    streamed = list(client.generate(model=model, prompt="the cat", stream=True))
    return {
        "chat": (answer.message.content, answer.done, answer.done_reason),
        "durations": (answer.total_duration or 0) > 0 and answer.eval_duration is not None,
        "stream": "".join(p.message.content or "" for p in parts),
        "dones": [p.done for p in parts],
        "generate": (generated.response, generated.done_reason, generated.eval_count),
        "generate_stream": "".join(p.response or "" for p in streamed),
        "last": streamed[-1].done_reason,
    }


async def test_ollama_client_chat_generate_and_streams_translated(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        async with door(entry_for("chat", llama), entry_for("small", mlx)) as d:
            for model, count in (("chat", 1), ("chat:latest", 1), ("small", 1)):
                seen = await trio.to_thread.run_sync(_ollama_session, d.url, model)
                assert seen["chat"] == (TOKEN, True, "length")
                assert seen["durations"] is True
                assert seen["stream"] == TOKEN
                assert seen["generate_stream"] == TOKEN
                assert seen["dones"] == [False, True]  # one token line, then the done line
                assert seen["generate"] == (TOKEN, "length", count)
                assert seen["last"] == "length"
        ended(d.scheduler)


def _ollama_lists(url: str) -> tuple[list[str], list[str], str | None]:
    with ollama.Client(host=url) as client:
        tags = [m.model or "" for m in client.list().models]
        running = [m.model or "" for m in client.ps().models]
        details = client.show("small").details
    return tags, running, details.format if details else None


async def test_ollama_client_lists_and_show(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        async with door(entry_for("chat", llama), entry_for("small", mlx)) as d:
            tags, running, kind = await trio.to_thread.run_sync(_ollama_lists, d.url)
    assert tags == ["chat", "small"]
    assert running == ["chat", "small"]
    assert kind == "safetensors"


def _ollama_errors(url: str) -> tuple[ollama.ResponseError, ollama.ResponseError, str | None]:
    with ollama.Client(host=url) as client:
        with pytest.raises(ollama.ResponseError) as missing:
            client.chat(model="nope", messages=USER)
        with pytest.raises(ollama.ResponseError) as unload:
            client.generate(model="chat", keep_alive=0)
        return missing.value, unload.value, client.generate(model="chat").done_reason


async def test_ollama_client_errors_are_response_errors(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama:
        async with door(entry_for("chat", llama)) as d:
            missing, unload, loaded = await trio.to_thread.run_sync(_ollama_errors, d.url)
        assert missing.status_code == 404
        assert "'nope' not found" in missing.error
        assert unload.status_code == 400
        assert "keep_alive" in unload.error
        assert loaded == "load"
        ended(d.scheduler)


async def test_llama_native_routes_and_upstream_passthrough(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        models = (entry_for("chat", llama), entry_for("small", mlx))
        async with door(*models) as d, httpx.AsyncClient(base_url=d.url) as client:
            done = await client.post("/completion", json={"model": "chat", "prompt": "x"})
            assert done.status_code == 200
            assert done.json()["content"] == TOKEN
            streamed = await client.post(
                "/completion", json={"model": "chat", "prompt": "x", "stream": True}
            )
            assert streamed.headers["x-accel-buffering"] == "no"
            assert '"stop": true' in streamed.text.strip().split("\n\n")[-1]
            tokens = await client.post("/tokenize", json={"model": "chat", "content": "a b"})
            assert tokens.status_code == 200
            assert "tokens" in tokens.json()
            refused = await client.post("/completion", json={"model": "small", "prompt": "x"})
            assert refused.status_code == 400
            assert "llama-server's own endpoint" in refused.json()["error"]["message"]
            props = await client.get("/upstream/chat/props")
            assert props.status_code == 200
            assert props.json()["total_slots"] >= 1
            mlx_models = await client.get("/upstream/small/v1/models")
            assert mlx_models.json()["data"][0]["id"] == "/models/tiny-mlx"
            unknown = await client.get("/upstream/nope/props")
            assert unknown.status_code == 404
            assert '"chat"' in unknown.json()["error"]["message"]
        ended(d.scheduler)
