"""Fidelity (issue 12, item 3): the same requests to a fake and to the REAL server give the
same status, the same content type and CORS headers (every ``access-control-*`` one, with
its value) and replies of the same JSON shape (keys and types, recursively; a stream of
server-sent events event by event), for llama-server on the tiny GGUF and mlx_lm.server
0.32.2 on the tiny mlx model. Where a real document is too big to copy whole (llama-server's
generation settings, a slot that has served), the fake's keys must be a subset of the real
ones, with the same types.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inferactors.testing import FakeServer, start_fake_server
from inferactors.testing._fake_processes import free_port

CHAT = {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 1}
REQUESTS: dict[str, tuple[str, str, object]] = {
    "health": ("GET", "/health", None),
    "models": ("GET", "/v1/models", None),
    "props": ("GET", "/props", None),
    "chat": ("POST", "/v1/chat/completions", CHAT),
    "openai-completion": ("POST", "/v1/completions", {"prompt": "the cat", "max_tokens": 1}),
    "llama-completion": ("POST", "/completion", {"prompt": "the cat", "n_predict": 1}),
    "unknown-path": ("GET", "/no/such/path", None),
    "bad-json": ("POST", "/v1/chat/completions", b"{not json"),
    "messages-not-an-array": ("POST", "/v1/chat/completions", {"messages": "x"}),
    "head-health": ("HEAD", "/health", None),
    "preflight": ("OPTIONS", "/v1/chat/completions", None),
    "chat-stream": ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
    "openai-completion-stream": (
        "POST",
        "/v1/completions",
        {"prompt": "the cat", "max_tokens": 1, "stream": True},
    ),
    "llama-completion-stream": (
        "POST",
        "/completion",
        {"prompt": "the cat", "n_predict": 1, "stream": True},
    ),
    "slots": ("GET", "/slots", None),
    "tokenize": ("POST", "/tokenize", {"content": "the cat"}),
    "metrics": ("GET", "/metrics", None),
    "embeddings": ("POST", "/v1/embeddings", {"input": "the cat"}),
}
SUBSET_PATHS = {"$.default_generation_settings.params", "$.generation_settings", "$[0]"}
"""Where the fake sends only some of the real keys (the real server's sampling settings)."""

START_S = 60.0


def shape(document: object) -> object:
    """Keys and JSON types, recursively; a list is the shape of its first item."""
    if isinstance(document, dict):
        return {key: shape(value) for key, value in document.items()}
    if isinstance(document, list):
        return [shape(document[0])] if document else []
    if isinstance(document, bool) or document is None:
        return repr(document) if document is None else "bool"
    return "number" if isinstance(document, int | float) else type(document).__name__


def differences(fake: object, real: object, path: str = "$") -> list[str]:
    """Where the fake's shape differs from the real one's."""
    if isinstance(fake, dict) and isinstance(real, dict):
        missing = sorted(set(real) - set(fake)) if path not in SUBSET_PATHS else []
        found = [f"{path}: the fake lacks {missing}"] if missing else []
        found += [f"{path}: the real server has no {key!r}" for key in set(fake) - set(real)]
        for key in set(fake) & set(real):
            found += differences(fake[key], real[key], f"{path}.{key}")
        return found
    if isinstance(fake, list) and isinstance(real, list):
        return differences(fake[0], real[0], path + "[0]") if fake and real else []
    return [] if fake == real else [f"{path}: fake {fake!r}, real {real!r}"]


def events(text: str) -> list[object]:
    """The ``data:`` of each server-sent event, parsed (``[DONE]`` kept as text; comments
    such as mlx_lm.server's ``: keepalive`` left out)."""
    found: list[object] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            found.append(data if data == "[DONE]" else json.loads(data))
    return found


def ask(client: httpx.Client, base_url: str, name: str) -> tuple[int, str, object]:
    """Status, content type and CORS headers, and the body's shape (or its text, when it is
    not JSON; or the shape of each event, for a stream)."""
    method, path, body = REQUESTS[name]
    if isinstance(body, bytes):
        headers = {"content-type": "application/json"}
        reply = client.request(method, base_url + path, content=body, headers=headers)
    else:
        reply = client.request(method, base_url + path, json=body)
    kind = reply.headers.get("content-type", "").lower()
    cors = {k: v for k, v in reply.headers.items() if k.lower().startswith("access-control-")}
    answer: object
    if kind.startswith("text/event-stream"):
        answer = ("events", [shape(event) for event in events(reply.text)])
    else:
        try:
            answer = shape(reply.json())
        except ValueError:
            answer = reply.text
    return reply.status_code, f"{kind} {sorted(cors.items())}", answer


def wait_until_serving(client: httpx.Client, process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the real server exited with {process.returncode}"
        try:
            if client.post(url + "/v1/chat/completions", json=CHAT).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the real server at {url} did not serve within {START_S} s")


def run_real(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        with httpx.Client(trust_env=False, timeout=30.0) as client:
            wait_until_serving(client, process, f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def real_llama(
    llama_server: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log = tmp_path_factory.mktemp("real-llama") / "log"
    yield from run_real([str(llama_server), "-m", str(tiny_gguf), "-c", "512"], log)


@pytest.fixture(scope="module")
def real_mlx(tiny_mlx_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("real-mlx")
    (where / "hf-cache").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(where), "HF_HUB_OFFLINE": "1"}
    env["HF_HUB_CACHE"] = str(where / "hf-cache")
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(tiny_mlx_model)]
    yield from run_real(argv, where / "log", env)


@pytest.fixture(scope="module")
def fakes_of(
    tiny_gguf: Path, tiny_mlx_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FakeServer]]:
    root = tmp_path_factory.mktemp("conformance-fakes")
    fakes = {
        "llamacpp": start_fake_server(root / "llama", flavor="llamacpp", model=str(tiny_gguf)),
        "mlx": start_fake_server(root / "mlx", flavor="mlx", model=str(tiny_mlx_model)),
    }
    yield fakes
    for fake in fakes.values():
        fake.stop()


def compare(fake_url: str, real_url: str, name: str) -> None:
    with httpx.Client(trust_env=False, timeout=30.0) as client:
        fake_status, fake_type, fake_answer = ask(client, fake_url, name)
        real_status, real_type, real_answer = ask(client, real_url, name)
    assert (fake_status, fake_type) == (real_status, real_type), name
    if isinstance(real_answer, tuple) and isinstance(fake_answer, tuple):
        fake_events, real_events = fake_answer[1], real_answer[1]
        assert len(fake_events) == len(real_events), (name, fake_events, real_events)
        for fake_event, real_event in zip(fake_events, real_events, strict=True):
            assert differences(fake_event, real_event) == [], name
    elif isinstance(real_answer, str | tuple) or isinstance(fake_answer, str | tuple):
        assert fake_answer == real_answer, name
    else:
        assert differences(fake_answer, real_answer) == [], name


@pytest.mark.llama_server
@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_the_fake_llama_server_answers_as_the_real_one(
    fakes_of: dict[str, FakeServer], real_llama: str, name: str
) -> None:
    compare(fakes_of["llamacpp"].base_url, real_llama, name)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_the_fake_mlx_server_answers_as_the_real_one(
    fakes_of: dict[str, FakeServer], real_mlx: str, name: str
) -> None:
    compare(fakes_of["mlx"].base_url, real_mlx, name)


def test_the_shape_comparison_sees_a_missing_key_a_type_and_a_status() -> None:
    real = shape({"a": 1, "b": {"c": "x"}, "d": [{"e": True}]})
    assert differences(shape({"a": 1.5, "b": {"c": "y"}, "d": [{"e": False}]}), real) == []
    assert differences(shape({"a": 1, "b": {"c": 2}, "d": []}), real) == [
        "$.b.c: fake 'number', real 'str'"
    ]
    assert differences(shape({"a": 1, "d": [{"e": None}]}), real) == [
        "$: the fake lacks ['b']",
        "$.d[0].e: fake 'None', real 'bool'",
    ]
    assert json.dumps(shape([])) == "[]"
