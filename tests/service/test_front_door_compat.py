"""The small routes clients expect of the address they are given, through the front door
over fake llama-server and mlx_lm.server processes:

- ``GET /`` and ``HEAD /``: Ollama's liveness answer, ``200 Ollama is running``
  (``text/plain``), which tools check before they use an Ollama address;
- ``POST /api/show`` with the older ``name`` field, as Ollama takes it (``model`` first);
- ``GET /v1/models/{id}``, OpenAI's retrieve (``client.models.retrieve``): the model's entry
  by any name that routes to it, a 404 in OpenAI's shape naming an unknown one.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import ollama
import openai
import pytest
import trio

from inferactors._config.front_door import FrontDoorConfig
from service.front_door_support import door, entry_for, fake

KEY = "front-door-key-0123456789"


async def test_the_root_says_ollama_is_running(tmp_path: Path) -> None:
    with fake(tmp_path) as llama:
        async with door(entry_for("chat", llama)) as d, httpx.AsyncClient() as client:
            got = await client.get(d.url + "/")
            head = await client.head(d.url + "/")
    assert (got.status_code, got.text) == (200, "Ollama is running")
    assert got.headers["content-type"].startswith("text/plain")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len("Ollama is running"))


async def test_the_root_still_wants_the_key_when_the_door_has_one(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    with fake(tmp_path / "llama") as llama:
        config = FrontDoorConfig(port=0, api_key_file=key)
        async with door(entry_for("chat", llama), config=config) as d, httpx.AsyncClient() as c:
            bare = await c.get(d.url + "/")
            keyed = await c.get(d.url + "/", headers={"Authorization": f"Bearer {KEY}"})
    assert bare.status_code == 401
    assert (keyed.status_code, keyed.text) == (200, "Ollama is running")


async def test_api_show_takes_the_older_name_field(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        models = (entry_for("chat", llama), entry_for("small", mlx))
        async with door(*models) as d, httpx.AsyncClient() as client:
            by_name = await client.post(d.url + "/api/show", json={"name": "small"})
            both = await client.post(d.url + "/api/show", json={"model": "chat", "name": "small"})
            empty = await client.post(d.url + "/api/show", json={"model": "", "name": "chat"})
            neither = await client.post(d.url + "/api/show", json={"verbose": True})
            wrong = await client.post(d.url + "/api/show", json={"name": 7})

            def show() -> ollama.ShowResponse:
                with ollama.Client(host=d.url) as ollama_client:
                    shown: ollama.ShowResponse = ollama_client.show("chat")  # sends "model"
                    return shown

            shown = await trio.to_thread.run_sync(show)
    assert by_name.status_code == 200
    assert by_name.json()["details"]["format"] == "safetensors"  # small: mlx_lm.server
    assert both.json()["details"]["format"] == "gguf"  # "model" wins, as in Ollama
    assert empty.json()["details"]["format"] == "gguf"
    assert shown.details is not None
    assert shown.details.format == "gguf"
    assert neither.status_code == 400
    assert neither.json()["error"].startswith("$.model: name the model to use")
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "$.name: expected a string, got 7"


async def test_the_inference_endpoints_read_model_only_as_ollamas_do(tmp_path: Path) -> None:
    with fake(tmp_path) as llama:
        async with door(entry_for("chat", llama)) as d, httpx.AsyncClient() as client:
            answer = await client.post(d.url + "/api/generate", json={"name": "chat"})
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("$.model: name the model to use")


def _retrieve(url: str, names: tuple[str, ...]) -> list[openai.types.Model | Exception]:
    out: list[openai.types.Model | Exception] = []
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
        for name in names:
            try:
                out.append(client.models.retrieve(name))
            except openai.APIError as error:  # the test says which
                out.append(error)
    return out


async def test_the_openai_client_retrieves_a_model(tmp_path: Path) -> None:
    with fake(tmp_path / "llama") as llama, fake(tmp_path / "mlx", "mlx") as mlx:
        models = (entry_for("chat", llama, aliases=("org/tiny",)), entry_for("small", mlx))
        async with door(*models) as d:
            names = ("chat", "org/tiny", "small", "chat:latest", "ghost")
            chat, alias, small, tagged, ghost = await trio.to_thread.run_sync(
                _retrieve, d.url, names
            )
            async with httpx.AsyncClient() as client:
                listed = (await client.get(d.url + "/v1/models")).json()["data"]
    assert isinstance(chat, openai.types.Model)
    assert (chat.id, chat.object, chat.owned_by) == ("chat", "model", "inferactors")
    assert chat.model_dump(exclude_unset=True) == listed[0]  # the list's own entry
    assert isinstance(alias, openai.types.Model)
    assert alias.id == "chat"  # the alias with a slash routes to chat
    assert isinstance(small, openai.types.Model)
    assert small.model_dump(exclude_unset=True) == listed[1]
    assert isinstance(tagged, openai.types.Model)
    assert tagged.id == "chat"  # Ollama's reading of a name, as every route does
    assert isinstance(ghost, openai.NotFoundError), repr(ghost)
    assert "'ghost' not found" in ghost.message
    assert 'the models here are: "chat", "small"' in ghost.message


@pytest.mark.parametrize("path", ["/v1/models/", "/v1/models/ghost/more"])
async def test_a_retrieve_of_no_model_is_a_404_in_openais_shape(tmp_path: Path, path: str) -> None:
    with fake(tmp_path) as llama:
        async with door(entry_for("chat", llama)) as d, httpx.AsyncClient() as client:
            answer = await client.get(d.url + path)
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["type"] == "not_found_error"
    assert error["code"] == 404
