"""A small application that warms a model up in Ollama with the official client, and tells a
load that timed out (Ollama's runner timeout) from any other failure."""

from __future__ import annotations

import ollama


class ModelWontLoad(Exception):
    """Ollama gave up loading the model (its runner did not start in time)."""


def warm_up(host: str, model: str, keep_alive: str = "30m") -> list[str]:
    """Load ``model`` with ``keep_alive``; return the models Ollama then has loaded.
    Raises ModelWontLoad on Ollama's load timeout, ollama.ResponseError otherwise."""
    with ollama.Client(host=host) as client:
        try:
            client.generate(model=model, keep_alive=keep_alive)
        except ollama.ResponseError as error:
            if "timed out waiting for llama runner to start" in error.error:
                raise ModelWontLoad(error.error) from error
            raise
        return [loaded.model or "" for loaded in client.ps().models]
