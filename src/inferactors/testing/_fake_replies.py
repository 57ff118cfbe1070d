"""The documents the fake servers answer with, shaped as the real servers' (pure).

Each shape was checked against the real llama-server (llama-cpp-python 0.3.36's build) and
the real mlx_lm.server 0.32.2 on the tiny models, key by key and type by type; the
conformance test (tests/testing/test_fake_conformance.py) keeps it so. The values are
fixed (one token, `TOKEN`), apart from ``created``, which reads the wall clock. Like the
fake server program, this module imports nothing of the ``inferactors`` package.
"""

from __future__ import annotations

import json
import time
from typing import Literal

TOKEN = " and"
"""The one token every completion answers (what the real tiny model says to "the cat")."""

BUILD_INFO = "b0-fake"
"""``/props`` ``build_info`` and the completions' ``system_fingerprint``."""

_META = {
    "vocab_type": 1,
    "n_vocab": 420,
    "n_ctx": 4096,
    "n_ctx_train": 4096,
    "n_embd": 64,
    "n_params": 127808,
    "size": 511232,
    "ftype": "all F32",
}
_TIMINGS = {
    "cache_n": 0,
    "prompt_n": 1,
    "prompt_ms": 0.1,
    "prompt_per_token_ms": 0.1,
    "prompt_per_second": 10000.0,
    "predicted_n": 1,
    "predicted_ms": 0.001,
    "predicted_per_token_ms": 0.0,
    "predicted_per_second": 0.0,
}
_USAGE = {
    "prompt_tokens": 1,
    "completion_tokens": 1,
    "total_tokens": 2,
    "prompt_tokens_details": {"cached_tokens": 0},
}
_CAPS = (
    "supports_object_arguments",
    "supports_parallel_tool_calls",
    "supports_preserve_reasoning",
    "supports_reasoning_effort",
    "supports_string_content",
    "supports_system_role",
    "supports_tool_calls",
    "supports_tools",
    "supports_typed_content",
)
_SETTINGS = {"n_predict": 1, "seed": 4294967295, "temperature": 0.8, "top_k": 40, "stream": False}

NO_LIST = {"error": "Unsupported method ('GET')"}
"""The body of a ``GET /v1/models`` answered without a list (``models_status``)."""


def llamacpp_models(model_id: str, *, loaded: bool) -> dict[str, object]:
    """llama-server's ``GET /v1/models``: its Ollama-style ``models`` and OpenAI ``data``;
    ``meta`` is null while loading (FC-03)."""
    details = {
        "parent_model": "",
        "format": "gguf",
        "family": "",
        "families": [""],
        "parameter_size": "",
        "quantization_level": "",
    }
    listed = {
        "name": model_id,
        "model": model_id,
        "modified_at": "",
        "size": "",
        "digest": "",
        "type": "model",
        "description": "",
        "tags": [""],
        "capabilities": ["completion"],
        "parameters": "",
        "details": details,
    }
    entry = {
        "id": model_id,
        "aliases": [model_id],
        "tags": [],
        "object": "model",
        "created": int(time.time()),
        "owned_by": "llamacpp",
        "meta": _META if loaded else None,
    }
    return {"models": [listed], "object": "list", "data": [entry]}


def props(model_id: str, model_path: str) -> dict[str, object]:
    """llama-server's ``GET /props`` (the generation settings cut to a few)."""
    caps = dict.fromkeys(_CAPS, False) | {"supports_string_content": True}
    caps["supports_system_role"] = True
    return {
        "default_generation_settings": {"n_ctx": 4096, "params": _SETTINGS},
        "total_slots": 4,
        "model_alias": model_id,
        "model_ftype": "all F32",
        "model_path": model_path,
        "modalities": {"vision": False, "video": False, "audio": False},
        "media_marker": "<__media__>",
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": False,
        "ui": False,
        "ui_settings": {},
        "chat_template": "",
        "chat_template_caps": caps,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "build_info": BUILD_INFO,
        "is_sleeping": False,
        "cors_proxy_enabled": False,
    }


def completion(
    flavor: Literal["llamacpp", "mlx"], model: str, path: str, number: int
) -> dict[str, object]:
    """The one-token answer to completion number ``number`` on ``path``."""
    if path in ("/completion", "/completions"):  # llama-server's own completion shape
        return {
            "index": 0,
            "content": TOKEN,
            "tokens": [],
            "id_slot": 0,
            "stop": True,
            "model": model,
            "tokens_predicted": 1,
            "tokens_evaluated": 1,
            "generation_settings": _SETTINGS,
            "prompt": "",
            "has_new_line": False,
            "truncated": False,
            "stop_type": "limit",
            "stopping_word": "",
            "tokens_cached": 1,
            "timings": _TIMINGS,
        }
    common: dict[str, object] = {
        "id": f"chatcmpl-fake-{number}",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": BUILD_INFO,
        "usage": _USAGE,
    }
    if flavor == "llamacpp":
        common["timings"] = _TIMINGS
    if path == "/v1/completions":
        choice: dict[str, object] = {"index": 0, "text": TOKEN, "finish_reason": "length"}
        if flavor == "llamacpp":
            choice["logprobs"] = None
        return {**common, "object": "text_completion", "choices": [choice]}
    message = {"role": "assistant", "content": TOKEN}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    return {**common, "object": "chat.completion", "choices": [choice]}


def bad_json(flavor: Literal["llamacpp", "mlx"], problem: str) -> tuple[int, dict[str, object]]:
    """The status and document of a completion whose body is not JSON: llama-server's 500
    ``server_error``, mlx_lm.server's 400."""
    if flavor == "mlx":
        return 400, {"error": f"Invalid JSON in request body: {problem}"}
    message = f"[json.exception.parse_error.101] parse error: {problem}"
    return 500, {"error": {"code": 500, "message": message, "type": "server_error"}}


def json_problem(body: bytes) -> str | None:
    """Why a non-empty ``body`` is not JSON, or None when it is JSON (or empty)."""
    if not body:
        return None
    try:
        json.loads(body)
    except ValueError as error:
        return str(error)
    return None


def model_field(body: bytes) -> object:
    """The ``"model"`` of a JSON object body, or None (no such key, not an object, not JSON)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get("model") if isinstance(document, dict) else None


# --- streaming, CORS and llama-server's other endpoints --------------------------------------


def wants_stream(body: bytes) -> bool:
    """Whether a JSON object ``body`` asks for ``"stream": true``."""
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and document.get("stream") is True


def completion_events(
    flavor: Literal["llamacpp", "mlx"], model: str, path: str, number: int
) -> list[object]:
    """The server-sent events of a streamed one-token completion on ``path``, as the real
    server sends them: JSON documents, then the text ``[DONE]`` (not on ``/completion``)."""
    whole = completion(flavor, model, path, number)
    if path in ("/completion", "/completions"):
        first: dict[str, object] = {"index": 0, "content": TOKEN, "tokens": [0], "stop": False}
        first["id_slot"] = -1
        first |= {"tokens_predicted": 1, "tokens_evaluated": 1}
        return [first, {**whole, "content": "", "stop": True}]
    head = {key: whole[key] for key in ("id", "created", "model", "system_fingerprint")}
    if path == "/v1/completions":
        return [*_text_chunks(flavor, head, whole), "[DONE]"]
    chunk = {**head, "object": "chat.completion.chunk"}
    if flavor == "mlx":
        said: dict[str, object] = {"role": "assistant", "content": TOKEN}
        return [_chunk(chunk, said, None), _chunk(chunk, {"role": "assistant"}, "length"), "[DONE]"]
    opening = _chunk(chunk, {"role": "assistant", "content": None}, None)
    closing = _chunk(chunk, {}, "length") | {"timings": _TIMINGS}
    return [opening, _chunk(chunk, {"content": TOKEN}, None), closing, "[DONE]"]


def _chunk(
    head: dict[str, object], delta: dict[str, object], reason: str | None
) -> dict[str, object]:
    return {**head, "choices": [{"index": 0, "finish_reason": reason, "delta": delta}]}


def _text_chunks(
    flavor: Literal["llamacpp", "mlx"], head: dict[str, object], whole: dict[str, object]
) -> list[dict[str, object]]:
    head = {**head, "object": "text_completion"}
    logprobs = {"logprobs": None} if flavor == "llamacpp" else {}
    said = {**head, "choices": [{"index": 0, "text": TOKEN, "finish_reason": None, **logprobs}]}
    last = {**head, "choices": [{"index": 0, "text": "", "finish_reason": "length", **logprobs}]}
    if flavor == "llamacpp":
        last |= {"usage": _USAGE, "timings": _TIMINGS}
    return [said, last]


def chat_problem(flavor: Literal["llamacpp", "mlx"], body: bytes) -> tuple[int, object] | None:
    """The 400 a chat completion whose ``messages`` is missing or not an array gets, or None."""
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    messages = document.get("messages")
    if isinstance(messages, list):
        return None
    if flavor == "mlx":
        if messages is None:
            return 400, {"error": "Request did not contain messages"}
        if isinstance(messages, str | dict):
            return 400, {"error": "'str' object has no attribute 'get'"}
        return 400, {"error": f"'{type(messages).__name__}' object is not iterable"}
    said = "'messages' is required" if messages is None else "Expected 'messages' to be an array"
    return 400, {"error": {"code": 400, "message": said, "type": "invalid_request_error"}}


def not_supported(what: str, flag: str) -> dict[str, object]:
    """llama-server's 501 for an endpoint it was not started for (``--metrics``, ...)."""
    message = f"This server does not support {what}. Start it with `{flag}`"
    return {"error": {"code": 501, "message": message, "type": "not_supported_error"}}


def slots(total: int = 4, n_ctx: int = 4096) -> list[dict[str, object]]:
    """llama-server's ``GET /slots``: every slot idle."""
    return [
        {"id": index, "n_ctx": n_ctx, "speculative": False, "is_processing": False}
        for index in range(total)
    ]


def tokenize(body: bytes) -> dict[str, object]:
    """llama-server's ``POST /tokenize``: one token per byte of ``content`` (ids below 420,
    the tiny model's vocabulary)."""
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        document = {}
    content = document.get("content") if isinstance(document, dict) else None
    text = content if isinstance(content, str) else ""
    return {"tokens": [byte % 420 for byte in text.encode()]}


def cors_headers(
    flavor: Literal["llamacpp", "mlx"], origin: str, *, preflight: bool
) -> list[tuple[str, str]]:
    """The CORS headers of every reply: llama-server echoes the request's ``Origin`` (empty
    when there is none) and adds the rest on a preflight (``OPTIONS``); mlx_lm.server sends
    ``*`` three times on every reply."""
    if flavor == "mlx":
        names = ("Origin", "Methods", "Headers")
        return [(f"Access-Control-Allow-{name}", "*") for name in names]
    headers = [("Access-Control-Allow-Origin", origin)]
    if preflight:
        headers += [
            ("Access-Control-Allow-Credentials", "true"),
            ("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"),
            ("Access-Control-Allow-Headers", "*"),
        ]
    return headers


def llamacpp_other(route: tuple[str, str], body: bytes) -> tuple[int, object] | None:
    """llama-server's status and document on its other endpoints (started without
    ``--metrics`` and ``--embeddings``), or None for a route that is none of them."""
    match route:
        case ("GET", "/slots"):
            return 200, slots()
        case ("POST", "/tokenize"):
            return 200, tokenize(body)
        case ("POST", "/detokenize"):
            return 200, {"content": TOKEN}
        case ("GET", "/metrics"):
            return 501, not_supported("metrics endpoint", "--metrics")
        case ("POST", "/v1/embeddings" | "/embeddings" | "/embedding"):
            return 501, not_supported("embeddings", "--embeddings")
    return None


def as_router(listed: dict[str, object], status: str | None) -> dict[str, object]:
    """A model list as a router lists it (llama.cpp ``server-models.cpp``): each entry with
    a ``status`` object; ``failed`` is an exited child (``unloaded``, failed, code 1)."""
    entries = listed.get("data")
    if status is None or not isinstance(entries, list):
        return listed
    value: dict[str, object] = {"value": status, "args": ["llama-server"]}
    if status == "failed":
        value = {"value": "unloaded", "args": ["llama-server"], "failed": True, "exit_code": 1}
    return {**listed, "data": [{**entry, "status": value} for entry in entries]}
