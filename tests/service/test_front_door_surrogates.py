"""A request whose JSON holds a lone UTF-16 surrogate escape (``"\\ud800"``: valid JSON, a
``str`` that UTF-8 cannot encode) is passed on as a direct client would send it, in every
dialect, streamed and not (real front door over HTTP, fake servers, httpx sending the
client's bytes as they are: the ``openai`` and ``ollama`` clients cannot encode such a
string themselves). Its grant is ended, and the next request is served.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.front_door_support import door, ended, entry_for, fake

LONE = r"\ud800"
"""The escape as the client's JSON holds it (six ASCII characters)."""


def _body(model: str, path: str, *, stream: bool) -> bytes:
    said = f'"stream":{"true" if stream else "false"}'
    if path == "/completion":
        return f'{{"model":"{model}","prompt":"a{LONE}b","n_predict":2,{said}}}'.encode()
    return (
        f'{{"model":"{model}","messages":[{{"role":"user","content":"a{LONE}b"}}],'
        f'"max_tokens":2,{said}}}'
    ).encode()


CASES = [
    ("/v1/chat/completions", "llamacpp"),
    ("/v1/chat/completions", "mlx"),
    ("/completion", "llamacpp"),
    ("/api/chat", "llamacpp"),
    ("/api/chat", "mlx"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "flavor"), CASES)
async def test_a_lone_surrogate_is_passed_on_escaped(
    tmp_path: Path, path: str, flavor: str, stream: bool
) -> None:
    with fake(tmp_path, flavor) as server:  # type: ignore[arg-type]
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(timeout=20) as client:
            answer = await client.post(
                d.url + path,
                content=_body("m", path, stream=stream),
                headers={"content-type": "application/json"},
            )
            text = answer.text
            after = await client.post(
                d.url + path,
                content=_body("m", path, stream=False).replace(LONE.encode(), b"c"),
                headers={"content-type": "application/json"},
            )
    assert answer.status_code == 200, text
    assert '"error"' not in text
    assert after.status_code == 200, after.text
    sent = [r.body for r in server.requests() if r.method == "POST"]
    assert any(f"a{LONE}b" in body for body in sent), sent  # the client's escape, as it was
    ended(d.scheduler)


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "openai"), ("/completion", "llama"), ("/api/chat", "ollama")],
)
async def test_a_lone_surrogate_in_a_model_name_is_a_404_in_the_dialect(
    tmp_path: Path, path: str, shape: str
) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(timeout=20) as client:
            answer = await client.post(
                d.url + path,
                content=_body(f"x{LONE}", path, stream=False),
                headers={"content-type": "application/json"},
            )
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    message = error if shape == "ollama" else error["message"]
    assert f"x{LONE}" in message  # named, the surrogate shown as its escape
    assert not d.scheduler.granted
