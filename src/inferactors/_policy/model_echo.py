"""The ``model`` an OpenAI answer names, rewritten to the name the client asked for (pure).

llama-server names its GGUF path there (``"model":"/srv/models/tiny.gguf"``): a client that
checks or logs ``response.model`` would see a path on the host instead of the name it sent,
as llama-swap's users would not. Every ``"model":"..."`` key of the answer's JSON is
rewritten, in a whole answer and in each event of a stream. A ``"model":`` key cannot occur
inside a JSON string (its quotes would be escaped), so the bytes are rewritten as they are.

A stream is rewritten line by line: `ModelEcho.feed` passes on every whole line at once and
keeps a partial line (no client can use it before its end) until the next chunk.
"""

from __future__ import annotations

import json
import re

import attrs

_MODEL_KEY = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')


def echo_model(body: bytes, name: str) -> bytes:
    """``body`` with every ``"model": "..."`` naming ``name``."""
    if b'"model"' not in body:
        return body
    named = b'"model":' + json.dumps(name, ensure_ascii=False).encode()
    return _MODEL_KEY.sub(lambda _: named, body)


@attrs.define
class ModelEcho:
    """`echo_model` over a stream's chunks, whole lines at a time."""

    name: str
    _partial: bytes = b""

    def feed(self, chunk: bytes) -> bytes:
        """The whole lines so far, rewritten; a partial last line waits for the next."""
        data = self._partial + chunk
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        return echo_model(data[:end], self.name) if end else b""

    def rest(self) -> bytes:
        """What is left at the stream's end (a last line without a line break)."""
        rest, self._partial = self._partial, b""
        return echo_model(rest, self.name)
