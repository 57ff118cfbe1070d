"""The front door in front of the real servers, used by the real ``openai`` and ``ollama``
clients (blocking clients, in worker threads): the real llama-server on the tiny GGUF and
the real mlx_lm.server on the tiny mlx model, whole answers and streams; and a client that
leaves a stream frees the llama-server slot that was generating for it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._flavor import InferFlavor
from inferactors.testing._tiny_mlx import write_tiny_mlx
from mlx_support import mlx_server
from service.front_door_support import door, ended

READY_S = 60.0
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "the cat"}]

pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)


async def _until_up(url: str, path: str = "/health") -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        with trio.fail_after(READY_S):
            while True:
                try:
                    if (await client.get(url + path)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


@pytest.fixture
async def llama(llama_server: Path, tiny_gguf: Path, free_port: int) -> AsyncIterator[str]:
    """The real llama-server (two slots), started by the test; its base URL."""
    argv = [str(llama_server), "-m", str(tiny_gguf), "--port", str(free_port), "-np", "2"]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{free_port}"
    try:
        await _until_up(url)
        yield url
    finally:
        process.kill()
        await process.wait()


def _model(
    name: str, flavor: InferFlavor, url: str, served: str = ""
) -> tuple[ModelEntry, Upstream]:
    entry = ModelEntry(name, (), flavor, Residency.RESIDENT, on_demand=False)
    return entry, Upstream(name, flavor, url, served)


def _openai_said(url: str, model: str) -> tuple[str, str, str | None]:
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        whole = client.chat.completions.create(model=model, messages=USER, max_tokens=4)
        stream = client.chat.completions.create(
            model=model,
            messages=USER,
            max_tokens=4,
            stream=True,
        )
        with stream:
            chunks = list(stream)
        said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    return whole.choices[0].message.content or "", said, reasons[-1]


def _ollama_said(url: str, model: str) -> dict[str, object]:
    options = {"num_predict": 4}
    with ollama.Client(host=url) as client:
        whole = client.chat(model=model, messages=USER, options=options)
        parts = list(client.chat(model=model, messages=USER, options=options, stream=True))
        generated = client.generate(model=model, prompt="the cat", options=options)
    return {
        "whole": whole.message.content,
        "whole_done": (whole.done, whole.done_reason, whole.eval_count),
        "stream": "".join(p.message.content or "" for p in parts),
        "last": (parts[-1].done, parts[-1].done_reason, parts[-1].eval_count),
        "all_but_last_open": not any(p.done for p in parts[:-1]),
        "generated": (generated.response != "", generated.done_reason),
        "timed": (generated.total_duration or 0) >= (generated.eval_duration or 0) > 0,
    }


async def test_openai_and_ollama_clients_use_the_real_llama_server(llama: str) -> None:
    async with door(_model("tiny", InferFlavor.LLAMACPP, llama)) as d:
        whole, streamed, reason = await trio.to_thread.run_sync(_openai_said, d.url, "tiny")
        assert whole.strip()
        assert streamed.strip()
        assert reason == "length"
        seen = await trio.to_thread.run_sync(_ollama_said, d.url, "tiny")
    assert seen["whole"]
    assert seen["stream"]
    assert seen["whole_done"] == (True, "length", 4)  # counted by the server's own usage
    assert seen["last"] == (True, "length", 4)
    assert seen["all_but_last_open"]
    assert seen["generated"] == (True, "length")
    assert seen["timed"]
    ended(d.scheduler)


async def _busy_slots(url: str) -> int:
    async with httpx.AsyncClient(trust_env=False) as client:
        slots = (await client.get(url + "/slots")).json()
    return sum(1 for slot in slots if slot["is_processing"])


async def _leave_while_generating(door_url: str, llama: str, body: dict[str, object]) -> bool:
    """Stream a chat through the door, leave after 5 events; whether the server's slot was
    still generating when the client left."""
    async with httpx.AsyncClient() as client:
        url = door_url + "/v1/chat/completions"
        async with client.stream("POST", url, json=body) as answer:
            seen = 0
            async for line in answer.aiter_lines():
                seen += line.startswith("data: ")
                if seen >= 5:
                    break
            return await _busy_slots(llama) == 1


async def test_a_client_that_leaves_frees_the_llama_server_slot(llama: str) -> None:
    body = {
        "model": "tiny",
        "messages": USER,
        "stream": True,
        "max_tokens": 100_000,
        "ignore_eos": True,
    }
    async with door(_model("tiny", InferFlavor.LLAMACPP, llama)) as d:
        # the tiny model fills its 4,096-token context in about 2.4 s: on a busy machine
        # the generation may end before the client leaves, so the case is tried again
        # (at most 3 times) until the client leaves while the slot still generates
        for _attempt in range(3):
            if await _leave_while_generating(d.url, llama, body):
                break
            with trio.fail_after(10.0):
                while await _busy_slots(llama):  # noqa: ASYNC110
                    await trio.sleep(0.05)
        else:
            raise AssertionError("the generation always ended before the client left")
        with trio.fail_after(10.0):
            while await _busy_slots(llama) or d.scheduler.in_flight["tiny"]:  # noqa: ASYNC110
                await trio.sleep(0.05)
        ended(d.scheduler)


@pytest.mark.skipif(sys.platform != "linux", reason="mlx-lm[cpu] is installed on Linux")
async def test_openai_and_ollama_clients_use_the_real_mlx_server(
    tmp_path: Path, free_port: int
) -> None:
    model = write_tiny_mlx(tmp_path.resolve() / "tiny-mlx")  # noqa: ASYNC240
    program = Path(sys.executable).parent / "mlx_lm.server"
    cache = tmp_path / "hf"
    cache.mkdir()
    async with mlx_server(program, model, free_port, cache, tmp_path / "mlx.log") as server:
        await _until_up(server.base_url, "/v1/models")
        async with door(_model("small", InferFlavor.MLX_LM, server.base_url, str(model))) as d:
            whole, streamed, reason = await trio.to_thread.run_sync(_openai_said, d.url, "small")
            seen = await trio.to_thread.run_sync(_ollama_said, d.url, "small")
    assert whole
    assert streamed
    assert reason == "length"
    assert seen["whole"]
    assert seen["stream"]
    assert seen["last"][:2] == (True, "length")  # type: ignore[index]
    assert seen["all_but_last_open"]
    assert seen["generated"] == (True, "length")
    ended(d.scheduler)
