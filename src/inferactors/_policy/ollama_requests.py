"""Ollama's native requests (``/api/chat``, ``/api/generate``, ``/api/embed``) as the
OpenAI-compatible requests llama-server and mlx_lm.server take (pure; no I/O).

An Ollama-only client can so use a model that llama-server or mlx_lm.server serves; the
answers go back through `ollama_replies`. What maps where (Ollama's ``docs/api.md`` and
``api/types.go``; the servers' fields per ``tools/server/README.md`` and
``mlx_lm/SERVER.md``):

- ``/api/chat`` → ``POST /v1/chat/completions`` with the same ``messages`` (``images``
  become ``image_url`` parts holding ``data:`` URLs; an assistant's ``tool_calls`` get the
  OpenAI shape, arguments as a JSON string), ``tools`` as they are, ``format`` as
  ``response_format`` (``"json"`` → ``json_object``, a schema → ``json_schema``).
- ``/api/generate`` → the chat endpoint with ``system`` and ``prompt`` as two messages (the
  model's template applies, as in Ollama), or, with ``"raw": true``, ``POST
  /v1/completions`` with the prompt as it is.
- ``/api/embed`` → ``POST /v1/embeddings`` (``input``: a string or a list of strings).
- ``options``: ``num_predict`` → ``max_tokens`` (a negative one means no limit and is left
  out), ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``seed``, ``stop``,
  ``presence_penalty``, ``frequency_penalty``, and ``repeat_penalty`` (mlx_lm.server:
  ``repetition_penalty``); llama-server also takes ``typical_p``, ``repeat_last_n`` and the
  ``mirostat`` options. Load-time options (``num_ctx``, ``num_gpu``, ``num_thread``, ...)
  belong to the run file, not to a request, and are ignored, as are keys neither API has.
- ``stream`` is true unless the request says ``false`` (Ollama's default); a stream asks
  for the usage in its last chunk (``stream_options.include_usage``) so the final Ollama
  line can count tokens.
- Refused with a message naming the field (`InvalidConfig`): a field of the wrong type,
  ``suffix`` (fill-in-the-middle: use ``/infill`` on a llama-server instance), ``template``
  and ``context`` (a prompt template or a token context from an earlier answer cannot be
  handed to these servers), and an image that is not PNG, JPEG, GIF or WebP.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._errors import InvalidConfig, shown
from .._flavor import InferFlavor

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"

_SAME_NAME_OPTIONS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
_LLAMA_ONLY_OPTIONS = ("typical_p", "repeat_last_n", "mirostat", "mirostat_tau", "mirostat_eta")
_REFUSED = {
    "suffix": "fill-in-the-middle is not translated: use /infill on a llama-server instance",
    "template": "a prompt template cannot be handed to this server: its own template applies",
    "context": "a token context from an earlier answer cannot be handed to this server",
}
_IMAGE_MAGIC = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
)

Document = Mapping[str, Any]


def wants_stream(document: Document) -> bool:
    """Whether an Ollama request streams its answer: true unless ``"stream": false``.

    Raises:
        InvalidConfig: ``stream`` is not a boolean.
    """
    stream = document.get("stream", True)
    if not isinstance(stream, bool):
        raise InvalidConfig(f"$.stream: expected true or false, got {shown(stream)}")
    return stream


def chat_body(document: Document, served_model: str, flavor: InferFlavor) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body for an Ollama ``/api/chat`` request (module
    docstring).

    Args:
        document: the request, parsed.
        served_model: the ``model`` the server expects (left out when empty).
        flavor: the server's flavor (which option names it reads).

    Raises:
        InvalidConfig: naming the field at fault (module docstring).
    """
    messages = document.get("messages", [])
    if not isinstance(messages, list):
        raise InvalidConfig(f"$.messages: expected an array, got {shown(messages)}")
    body = _common(document, served_model, flavor)
    body["messages"] = [_message(item, f"$.messages[{i}]") for i, item in enumerate(messages)]
    tools = document.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidConfig(f"$.tools: expected an array, got {shown(tools)}")
        body["tools"] = tools
    return body


def generate_body(
    document: Document, served_model: str, flavor: InferFlavor
) -> tuple[str, dict[str, Any]]:
    """The upstream path and body for an Ollama ``/api/generate`` request with a prompt: the
    chat endpoint with ``system`` and ``prompt`` as messages, or ``/v1/completions`` with
    the prompt as it is when ``"raw": true`` (module docstring).

    Raises:
        InvalidConfig: naming the field at fault.
    """
    for key, why in _REFUSED.items():
        if document.get(key) not in (None, "", []):
            raise InvalidConfig(f"$.{key}: {why}")
    prompt = _text(document.get("prompt", ""), "$.prompt")
    body = _common(document, served_model, flavor)
    if _flag(document, "raw"):
        body["prompt"] = prompt
        return COMPLETIONS_PATH, body
    messages: list[dict[str, Any]] = []
    system = document.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _text(system, "$.system")})
    user = {"role": "user", "content": prompt, "images": document.get("images")}
    messages.append(_message(user, "$"))
    body["messages"] = messages
    return CHAT_PATH, body


def embed_body(document: Document, served_model: str) -> dict[str, Any]:
    """The ``/v1/embeddings`` body for an Ollama ``/api/embed`` request.

    Raises:
        InvalidConfig: ``input`` is neither a string nor an array of strings.
    """
    given = document.get("input", "")
    if isinstance(given, list):
        inputs = [_text(item, f"$.input[{i}]") for i, item in enumerate(given)]
        body: dict[str, Any] = {"input": inputs}
    else:
        body = {"input": _text(given, "$.input")}
    dimensions = document.get("dimensions")
    if dimensions is not None:
        body["dimensions"] = _number(dimensions, "$.dimensions")
    if served_model:
        body["model"] = served_model
    return body


def is_load_request(document: Document) -> bool:
    """Whether an ``/api/generate`` or ``/api/chat`` request only asks for the model to be
    loaded (no prompt, no messages): Ollama answers it with ``done_reason`` ``"load"``."""
    prompt = document.get("prompt")
    messages = document.get("messages")
    return prompt in (None, "") and messages in (None, [])


# ---- the parts ---------------------------------------------------------------------------


def _common(document: Document, served_model: str, flavor: InferFlavor) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if served_model:
        body["model"] = served_model
    stream = wants_stream(document)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(_options(document.get("options"), flavor))
    response_format = _response_format(document.get("format"))
    if response_format is not None:
        body["response_format"] = response_format
    return body


def _options(options: object, flavor: InferFlavor) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise InvalidConfig(f"$.options: expected an object, got {shown(options)}")
    out: dict[str, Any] = {}
    names = _SAME_NAME_OPTIONS + (_LLAMA_ONLY_OPTIONS if flavor is InferFlavor.LLAMACPP else ())
    for name in names:
        if options.get(name) is not None:
            out[name] = _number(options[name], f"$.options.{name}")
    if options.get("repeat_penalty") is not None:
        value = _number(options["repeat_penalty"], "$.options.repeat_penalty")
        key = "repetition_penalty" if flavor is InferFlavor.MLX_LM else "repeat_penalty"
        out[key] = value
    if options.get("num_predict") is not None:
        limit = _number(options["num_predict"], "$.options.num_predict")
        if limit >= 0:
            out["max_tokens"] = limit
    if options.get("stop") is not None:
        out["stop"] = _stop(options["stop"])
    return out


def _stop(stop: object) -> str | list[str]:
    if isinstance(stop, str):
        return stop
    if isinstance(stop, list):
        return [_text(item, f"$.options.stop[{i}]") for i, item in enumerate(stop)]
    raise InvalidConfig(f"$.options.stop: expected a string or an array, got {shown(stop)}")


def _response_format(given: object) -> dict[str, Any] | None:
    if given in (None, ""):
        return None
    if given == "json":
        return {"type": "json_object"}
    if isinstance(given, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": given}}
    raise InvalidConfig(f'$.format: expected "json" or a JSON schema, got {shown(given)}')


def _message(item: object, path: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidConfig(f"{path}: expected an object, got {shown(item)}")
    role = _text(item.get("role", ""), f"{path}.role")
    content = _text(item.get("content", ""), f"{path}.content")
    message: dict[str, Any] = {"role": role, "content": content}
    images = item.get("images")
    if images:
        message["content"] = _with_images(content, images, f"{path}.images")
    calls = item.get("tool_calls")
    if calls:
        message["tool_calls"] = _tool_calls(calls, f"{path}.tool_calls")
    if item.get("tool_name") is not None:
        message["name"] = _text(item["tool_name"], f"{path}.tool_name")
    if item.get("thinking"):
        message["reasoning_content"] = _text(item["thinking"], f"{path}.thinking")
    return message


def _with_images(content: str, images: object, path: str) -> list[dict[str, Any]]:
    if not isinstance(images, list):
        raise InvalidConfig(f"{path}: expected an array of base64 images, got {shown(images)}")
    parts: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    for index, image in enumerate(images):
        data = _text(image, f"{path}[{index}]")
        url = f"data:{_image_type(data, f'{path}[{index}]')};base64,{data}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _image_type(data: str, path: str) -> str:
    for magic, media_type in _IMAGE_MAGIC:
        if data.startswith(magic):
            return media_type
    raise InvalidConfig(f"{path}: not a base64 PNG, JPEG, GIF or WebP image")


def _tool_calls(calls: object, path: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidConfig(f"{path}: expected an array, got {shown(calls)}")
    out = []
    for index, call in enumerate(calls):
        where = f"{path}[{index}].function"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise InvalidConfig(f"{where}: expected an object, got {shown(function)}")
        arguments = function.get("arguments", {})
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        name = _text(function.get("name", ""), f"{where}.name")
        spec = {"name": name, "arguments": text}
        out.append({"id": f"call_{index}", "type": "function", "function": spec})
    return out


def _text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidConfig(f"{path}: expected a string, got {shown(value)}")
    return value


def _number(value: object, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{path}: expected a number, got {shown(value)}")
    return value


def _flag(document: Document, key: str) -> bool:
    value = document.get(key, False)
    if not isinstance(value, bool):
        raise InvalidConfig(f"$.{key}: expected true or false, got {shown(value)}")
    return value
