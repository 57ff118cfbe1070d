"""A small application: ask an OpenAI-style server (llama-server, mlx_lm.server) for a reply,
retrying while the model loads (503) and after the server dropped the connection."""

from __future__ import annotations

import time

import httpx


class ServerUnavailable(Exception):
    """The server did not answer within the attempts."""


def ask(
    base_url: str, prompt: str, *, attempts: int = 20, pause_s: float = 0.1, timeout_s: float = 5.0
) -> str:
    """The server's reply to ``prompt`` (one token). Retries a 503 and a lost connection
    ``attempts`` times, ``pause_s`` seconds apart; raises ServerUnavailable after that."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    problem = "no attempt made"
    with httpx.Client(base_url=base_url, timeout=timeout_s, trust_env=False) as client:
        for _ in range(attempts):
            try:
                reply = client.post("/v1/chat/completions", json=body)
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if reply.status_code == 200:
                    content: str = reply.json()["choices"][0]["message"]["content"]
                    return content
                if reply.status_code != 503:
                    reply.raise_for_status()
                problem = "503 (loading)"
            time.sleep(pause_s)
    raise ServerUnavailable(f"{base_url}: {problem} after {attempts} attempts")
