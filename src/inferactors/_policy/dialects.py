"""The API dialects the front door speaks, and the shape each gives an error (pure; no I/O).

A client talks to the front door in one dialect and hears every failure in that dialect's
own shape, so its library raises its usual error with the message we wrote:

- **OpenAI** (``/v1/...``) and **llama.cpp native** (``/completion``, ``/infill``,
  ``/tokenize``, ``/detokenize``, ``/upstream/NAME/...``): llama-server's envelope, which
  the ``openai`` client reads: ``{"error": {"code": 404, "message": "...", "type":
  "not_found_error", "param": "model"}}`` (``param`` only when a request field is at fault).
  In a server-sent event stream, an error is one ``data: {"error": {...}}`` event, and no
  ``data: [DONE]`` follows it.
- **Ollama** (``/api/...``): ``{"error": "..."}``; in an NDJSON stream, one such line, and
  no ``"done": true`` line follows it.
"""

from __future__ import annotations

import enum
import json

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    411: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "not_supported_error",
    502: "server_error",
    503: "unavailable_error",
    504: "timeout_error",
}
"""llama-server's error ``type`` for each status (its ``format_error_response`` names, with
OpenAI's ``rate_limit_error`` for 429); any status not listed reads ``server_error`` at 5xx
and ``invalid_request_error`` below."""


class Dialect(enum.Enum):
    """Which API a request came in through; it decides the shape of every error it gets."""

    OPENAI = "openai"
    LLAMACPP = "llama.cpp"
    OLLAMA = "ollama"

    @property
    def streams_sse(self) -> bool:
        """Whether its streams are server-sent events (else NDJSON lines)."""
        return self is not Dialect.OLLAMA


def error_type(status: int) -> str:
    """The ``type`` of an error with HTTP ``status`` in llama-server's envelope."""
    fallback = "server_error" if status >= 500 else "invalid_request_error"
    return ERROR_TYPES.get(status, fallback)


def error_document(
    dialect: Dialect, status: int, message: str, *, param: str | None = None
) -> dict[str, object]:
    """The JSON body of an error answer in ``dialect`` (module docstring).

    Args:
        dialect: the dialect the request came in through.
        status: the HTTP status the answer carries.
        message: what went wrong, in words (it names the field or model at fault).
        param: the request field at fault (``"model"``, ``"messages[0].content"``), if any;
            Ollama's shape has no room for it (the message names it).
    """
    if dialect is Dialect.OLLAMA:
        return {"error": message}
    error: dict[str, object] = {"code": status, "message": message, "type": error_type(status)}
    if param is not None:
        error["param"] = param
    return {"error": error}


def error_frame(dialect: Dialect, message: str, status: int = 502) -> bytes:
    """The last frame of a stream that failed: one SSE event ``data: {"error": ...}`` or one
    NDJSON line ``{"error": "..."}`` (module docstring). Nothing may follow it."""
    document = error_document(dialect, status, message)
    text = json.dumps(document, separators=(",", ":"))
    return f"data: {text}\n\n".encode() if dialect.streams_sse else f"{text}\n".encode()
