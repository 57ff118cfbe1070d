"""Whether a server's stream ended the way a whole answer ends (pure; no I/O).

The front door passes a stream on chunk by chunk and keeps only its last few chunks. When
the server's connection ends, a clean end of the transport does not prove the answer was
whole: mlx_lm.server ends its streams by closing the connection, so a server that died
mid-answer looks the same as one that finished. What the last event says does:

- OpenAI streams (``/v1/chat/completions``, ``/v1/completions``) end with ``data: [DONE]``;
- llama.cpp's native streams (``/completion``, ``/infill``) end with an event whose
  ``"stop"`` is true;
- Ollama's NDJSON streams end with a line whose ``"done"`` is true.

A stream whose last event is an error (``{"error": ...}``) also ended truthfully: the
server said what went wrong, and the front door adds nothing.
"""

from __future__ import annotations

import enum

from .._errors import InvalidConfig
from .._safe_json import parse_json


class StreamEnd(enum.Enum):
    """How a whole stream of one kind ends (module docstring)."""

    OPENAI_DONE = "openai"
    LLAMA_STOP = "llama.cpp"
    OLLAMA_DONE = "ollama"
    ANY = "any"
    """Unknown kind (``/upstream/NAME/...``): only a broken transport is a cut stream."""


def last_sse_data(tail: bytes) -> str | None:
    """The ``data`` of the last whole event in the end of a server-sent event stream, None
    when there is none. Multi-line data is joined with newlines, as the format says."""
    last: list[str] = []
    event: list[str] = []
    for line in tail.decode("utf-8", errors="replace").splitlines():
        if line.startswith("data:"):
            event.append(line[5:].removeprefix(" "))
        elif not line.strip():
            last, event = (event or last), []
    return "\n".join(last) if last else None


def last_ndjson_line(tail: bytes) -> str | None:
    """The last non-empty line of the end of an NDJSON stream, None when there is none."""
    lines = [line for line in tail.split(b"\n") if line.strip()]
    return lines[-1].decode("utf-8", errors="replace") if lines else None


def ended_whole(kind: StreamEnd, tail: bytes) -> bool:
    """Whether a stream of ``kind`` whose last bytes are ``tail`` ended as a whole answer
    (or with the server's own error), after its transport ended cleanly."""
    if kind is StreamEnd.ANY:
        return True
    last = last_ndjson_line(tail) if kind is StreamEnd.OLLAMA_DONE else last_sse_data(tail)
    if last is None:
        return False
    if kind is StreamEnd.OPENAI_DONE and last.strip() == "[DONE]":
        return True
    document = _json(last)
    if not isinstance(document, dict):
        return False
    if "error" in document:
        return True
    if kind is StreamEnd.LLAMA_STOP:
        return document.get("stop") is True
    return kind is StreamEnd.OLLAMA_DONE and document.get("done") is True


def _json(text: str) -> object:
    """``text`` read by the safe parser, or None when it is not JSON (or refused)."""
    try:
        return parse_json(text)
    except InvalidConfig:
        return None
