"""What a probe reply means: the pure parsing of the replies a probe gets.

Functions that turn a status code and a body into a health value or a reading
(`classify_health`, `classify_models_status`, `classify_ollama_version`,
`parse_model_ids`, `model_list_problem`, `parse_ollama_version`, `completion_body`,
`parse_completion`, `refusal`). The values they make (`Up`, `Loading`, `Unhealthy`,
`Unreachable`, `ServerReport`, `CompletionResult`) are ``probe_report.py``'s. No I/O,
tested without an event loop; the HTTP edge that uses them is `probe.ProbeClient`.

Every body is read through `inferactors._safe_json.parse_json` (`reply_object`): a reply
nested too deep, with a duplicate key or a huge integer is a bad reply (`BackendError`, or
"nothing" for the lenient readers), never a RecursionError or ValueError.
"""

from __future__ import annotations

import re
from typing import TypeAlias

from .._errors import BackendError, InvalidConfig, RequestRefused
from .._safe_json import parse_json
from .probe_report import Busy, Loading

# `_edges/probe.py` and `_actors/instance/probing.py` still import these values from here.
from .probe_report import CompletionResult as CompletionResult
from .probe_report import Health as Health
from .probe_report import ServerReport as ServerReport
from .probe_report import Unhealthy as Unhealthy
from .probe_report import Unreachable as Unreachable
from .probe_report import Up as Up
from .probe_report import serving as serving
from .router_models import RouterModel, router_models_of

_SNIPPET_CHARS = 200
NO_SUCH_ROUTE = frozenset({404, 501})
"""No such route, not unwell: 404, or 501 (``http.server`` without a handler for it)."""


def classify_health(status: int, body: bytes = b"") -> Health | None:
    """Classify a llama-server or mlx_lm.server ``GET /health`` status.

    200 is `Up`, 503 is `Loading`, 404 and 501 are None (the server has no ``/health``: the
    caller falls back to ``GET /v1/models``; 501 is what Python's ``BaseHTTPRequestHandler``
    answers for a method it has no handler for, as mlx_lm.server builds without a GET
    route do), and any other code, 302 and 500 included, is ``Unhealthy("/health returned
    HTTP c")``. Two refinements read a 503's body:

    - mlx_lm.server's ``{"status": "unavailable"}`` (0.32.2 and later, once its generation
      thread has died) is `Unhealthy` (``dead``), not
      `Loading`, since it will never load;
    - a server that says it has no free slot is `Busy`, not `Loading`:
      old llama-server builds' ``{"status": "no slot available", "slots_idle": 0, ...}``
      (llama.cpp PR #5548), ``/slots?fail_on_no_slot=1``'s error, or any 503 whose
      ``status`` or ``error.message`` speaks of busy or unavailable slots. llama-server's
      ``{"error": {"message": "Loading model", ...}}``, old builds' ``{"status": "loading
      model"}`` and a 503 with any other body stay `Loading`.
    """
    if status == 200:
        return Up()
    if status == 503:
        return _unavailable(body) or Loading()
    if status in NO_SUCH_ROUTE:
        return None
    return Unhealthy(f"/health returned HTTP {status}")


def classify_models_status(status: int) -> Health:
    """Classify ``GET /v1/models`` when ``/health`` was 404 or 501: 200 `Up`, 503 `Loading`,
    501 `Up` (an HTTP server that has neither route but answered: only readiness's real
    token can tell more, and it is asked for before Running), else
    ``Unhealthy("/v1/models returned HTTP c")``."""
    if status == 501:
        return Up()
    return _by_status(status, "/v1/models")


def classify_ollama_version(status: int) -> Health:
    """Classify Ollama's ``GET /api/version``: 200 `Up`, 503 `Loading`, else
    ``Unhealthy("/api/version returned HTTP c")``."""
    return _by_status(status, "/api/version")


def parse_model_ids(body: bytes) -> tuple[str, ...]:
    """Model ids from a model list body, in the server's order.

    Reads an OpenAI list (``{"data": [{"id": ...}]}``, llama-server and mlx_lm.server
    ``/v1/models``) or an Ollama list (``{"models": [{"name": ...}]}``, ``/api/tags`` and
    ``/api/ps``). Lenient: a body that is not JSON (mlx_lm.server
    can send 200 with an empty body), or entries without a string id, yield
    nothing rather than an error, since the list only informs matching.
    """
    return model_ids_of(json_object(body))


def model_ids_of(document: dict[str, object] | None) -> tuple[str, ...]:
    """`parse_model_ids` of a body already parsed (None: not a JSON object)."""
    if document is None:
        return ()
    ids = _field_of_each(document.get("data"), "id")
    return ids if ids else _field_of_each(document.get("models"), "name")


ListRead: TypeAlias = tuple[tuple[str, ...], str | None, tuple[RouterModel, ...]]
"""What `read_model_list` reads from a model list: ids, why unreadable, router entries."""


def read_model_list(path: str, status: int, body: bytes) -> ListRead:
    """A list reply's ids, why it is unreadable (`model_list_problem`) and its router
    entries (`router_models_of`), from one parse of ``body``. A list that names a model is
    readable, so the body is parsed a second time only when no id came out (rarely: an
    empty, failed or malformed list), never on a healthy probe."""
    document = json_object(body) if status == 200 else None
    ids = model_ids_of(document)
    problem = None if ids else model_list_problem(path, status, body)
    return ids, problem, router_models_of(document)


def model_list_problem(path: str, status: int, body: bytes) -> str | None:
    """Why the model list ``GET path`` answered cannot be read, or None when it can.

    None for a 200 whose body is a JSON object with a ``data`` (OpenAI) or ``models``
    (Ollama) list that is empty or names at least one model, and for a 404 or a 501 (the
    server has no list endpoint: an mlx_lm.server from before its model list answers 501
    ``Unsupported method ('GET')``; nothing to confirm, readiness's real token decides).
    Otherwise ``"model list unreadable: ..."`` in the server's words: another status, a
    body that is not a JSON object (a nesting bomb, a duplicate key, ...; `reply_object`),
    no such list, or entries none of which has a string id. The lenient `parse_model_ids`
    still reads what it can.
    """
    if status in NO_SUCH_ROUTE:
        return None
    if status != 200:
        return f"model list unreadable: {path} returned HTTP {status}"
    try:
        document = reply_object(body)
    except BackendError as error:
        return f"model list unreadable: {path} {error}"
    for key, field in (("data", "id"), ("models", "name")):
        entries = document.get(key)
        if isinstance(entries, list) and (not entries or _field_of_each(entries, field)):
            return None
    return f'model list unreadable: {path} lists no model with a string "id" or "name"'


def parse_ollama_version(body: bytes) -> str | None:
    """The ``version`` string of Ollama's ``/api/version`` body, or None if absent."""
    document = json_object(body)
    version = None if document is None else document.get("version")
    return version if isinstance(version, str) else None


def completion_body(model: str | None) -> dict[str, object]:
    """The one-token chat completion request body.

    ``{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": false}``,
    plus ``"model"`` only when ``model`` is not None: mlx_lm.server must get no model field or
    exactly its ``--model`` path, or it tries to load another model.
    """
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "stream": False,
    }
    if model is not None:
        body["model"] = model
    return body


def parse_completion(status: int, body: bytes) -> tuple[str, str | None]:
    """Check a chat completion reply; return its text and ``finish_reason``.

    The reply must be HTTP 200 with a JSON object whose ``choices[0].message.content`` is a
    string. A null ``content`` next to a string ``reasoning_content`` (llama-server's reasoning
    format) also counts, with that as the text.

    Raises:
        RequestRefused: a 401 or 403 reply: ``"deep health: the server refuses our requests
            (HTTP 401: <its words>)"`` (`refusal`).
        BackendError: ``"deep health: completion returned HTTP c: <first 200 chars>"`` for a
            non-200 reply, or a message naming the missing or mistyped field of the body.
    """
    refused = refusal(status, body)
    if refused is not None:
        raise RequestRefused(f"deep health: the server refuses our requests ({refused})", refused)
    if status != 200:
        raise BackendError(f"deep health: completion returned HTTP {status}: {_snippet(body)}")
    try:
        document = reply_object(body)
    except BackendError as error:
        raise BackendError(f"deep health: completion {error}") from None
    choice = _first_choice(document)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise BackendError("deep health: completion body has no choices[0].message object")
    reason = choice.get("finish_reason")
    return _message_text(message), reason if isinstance(reason, str) else None


def refusal(status: int, body: bytes) -> str | None:
    """``"HTTP 401: <the server's words>"`` for a 401 or 403 reply (llama-server started with
    ``--api-key`` answers ``{"error": {"message": "Invalid API Key", ...}}``), else None.
    The words are the body's ``error.message``, ``error``, ``detail`` or ``message`` string,
    else its first 200 characters; ``HTTP 401`` alone when it says nothing."""
    if status not in (401, 403):
        return None
    parsed = json_object(body)
    document = parsed or {}
    error = document.get("error")
    nested = error.get("message") if isinstance(error, dict) else error
    candidates = (nested, document.get("detail"), document.get("message"))
    said = next((c for c in candidates if isinstance(c, str) and c.strip()), None)
    if said is None and parsed is None:  # not JSON: the body is its words
        said = _snippet(body)
    words = " ".join((said or "").split())[:_SNIPPET_CHARS]
    return f"HTTP {status}: {words}" if words else f"HTTP {status}"


def _by_status(status: int, path: str) -> Health:
    if status in (200, 503):
        return Up() if status == 200 else Loading()
    return Unhealthy(f"{path} returned HTTP {status}")


_BUSY_WORDS = re.compile(r"\bno (free |idle )?slots?\b|\bslots? (are |is )?(busy|full)\b|\bbusy\b")


def _unavailable(body: bytes) -> Health | None:
    document = json_object(body)
    if document is None:
        return None
    if document.get("status") == "unavailable":
        why = "/health returned HTTP 503 unavailable (the generation thread died)"
        return Unhealthy(why, dead=True)
    said = _said(document)
    if document.get("slots_idle") == 0 or _BUSY_WORDS.search(said.lower()):
        return Busy(said[:_SNIPPET_CHARS] or "no slot available")
    return None


def _said(document: dict[str, object]) -> str:
    """A 503 body's words: its ``status`` string, else its ``error.message`` string."""
    status = document.get("status")
    if isinstance(status, str):
        return status
    error = document.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else ""


def json_object(body: bytes) -> dict[str, object] | None:
    """The JSON object ``body`` holds, or None when it is a bad reply (see `reply_object`)."""
    try:
        return reply_object(body)
    except BackendError:
        return None


def reply_object(body: bytes) -> dict[str, object]:
    """The JSON object of a server's reply, read by `inferactors._safe_json.parse_json`.

    Raises:
        BackendError: ``"body is not a JSON object: <why>"``, where why is the parser's
            refusal (not UTF-8, a syntax error, nesting over 64 levels, a duplicate key, an
            integer over 100 digits, each with its line or JSON path) or the first 200
            characters of a body that is JSON but not an object.
    """
    try:
        document = parse_json(body)
    except InvalidConfig as error:
        raise BackendError(f"body is not a JSON object: {error}") from None
    if not isinstance(document, dict):
        raise BackendError(f"body is not a JSON object: {_snippet(body)}")
    return document


def _field_of_each(entries: object, field: str) -> tuple[str, ...]:
    if not isinstance(entries, list):
        return ()
    values = (entry.get(field) for entry in entries if isinstance(entry, dict))
    return tuple(value for value in values if isinstance(value, str))


def _first_choice(document: dict[str, object]) -> dict[str, object]:
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendError("deep health: completion body has no choices[0] object")
    return choices[0]


def _message_text(message: dict[str, object]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    reasoning = message.get("reasoning_content")
    if content is None and isinstance(reasoning, str):
        return reasoning
    raise BackendError("deep health: completion body choices[0].message.content is not a string")


def _snippet(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")[:_SNIPPET_CHARS]
