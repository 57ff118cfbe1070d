"""What the fake Ollama's tests share: a load error in Ollama's words and a generate."""

from __future__ import annotations

import httpx

RUNNER_TIMEOUT = "timed out waiting for llama runner to start - progress 0.00 - "
"""What Ollama says when its runner does not start in time (a load error)."""


async def generate(http: httpx.AsyncClient, body: dict[str, object]) -> httpx.Response:
    return await http.post("/api/generate", json=body)
