"""The ``model`` an OpenAI answer names, rewritten to the name the client asked for (pure).

llama-server names its GGUF path there (``"model":"/srv/models/tiny.gguf"``): a client that
checks or logs ``response.model`` would see a path on the host instead of the name it sent,
as llama-swap's users would not. Every ``"model":"..."`` key of the answer's JSON is
rewritten, in a whole answer and in each event of a stream. A ``"model":`` key cannot occur
inside a JSON string (its quotes would be escaped), so the bytes are rewritten as they are.

A stream is rewritten a whole frame at a time (`inferactors._policy.stream_frames`): a
key is never split between two calls.
"""

from __future__ import annotations

import re

from .._safe_json import dump_json

_MODEL_KEY = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')


def echo_model(body: bytes, name: str) -> bytes:
    """``body`` with every ``"model": "..."`` naming ``name``."""
    if b'"model"' not in body:
        return body
    named = b'"model":' + dump_json(name)
    return _MODEL_KEY.sub(lambda _: named, body)
