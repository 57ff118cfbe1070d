"""OpenAI-compatible answers (llama-server's, mlx_lm.server's) as Ollama's native answers
(pure; no I/O): the other half of `ollama_requests`.

- A chat completion → ``{"model", "created_at", "message": {"role": "assistant",
  "content", "thinking"?, "tool_calls"?}, "done": true, "done_reason", durations, counts}``;
  through ``/api/generate`` the text is ``"response"`` instead of ``"message"``.
- A stream (`StreamTranslation`): each chunk that says something becomes one line
  ``{"model", "created_at", "message" | "response", "done": false}``; the last line
  (``"done": true``) comes only once the server said why it stopped (``finish_reason``).
  A stream that ends before that, or carries an error, ends with an error line instead:
  never a made-up ``"done": true``.
- ``done_reason``: ``"stop"`` (also for ``tool_calls``) or ``"length"``, as the server said.
- Counts: ``prompt_eval_count`` and ``eval_count`` from the server's ``usage`` (llama-server:
  also its ``timings``); left out when the server did not say.
- Durations are integer nanoseconds, as Ollama gives them: ``total_duration`` (from the
  request's arrival to the server's last byte), ``load_duration`` (waiting for the instance:
  an on-demand start or a queue), and ``prompt_eval_duration`` / ``eval_duration`` from
  llama-server's ``timings`` (``prompt_ms``, ``predicted_ms``); a server without timings
  (mlx_lm.server) gets the front door's own measure: the time to the first token, then the
  rest (all of it in ``eval_duration`` when the answer was not streamed).
- An embedding → ``{"model", "embeddings": [[...], ...], "total_duration",
  "load_duration", "prompt_eval_count"}``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from .._errors import cut

NS_PER_S = 1_000_000_000

Kind = Literal["chat", "generate"]
"""Which Ollama endpoint the answer goes to: ``/api/chat`` (a ``message``) or
``/api/generate`` (a ``response`` text)."""


@attrs.frozen
class Timing:
    """What the front door measured of one request, float seconds.

    Attributes:
        load_s: waiting for the instance (an on-demand start, a queue).
        total_s: from the request's arrival to the server's last byte.
        upstream_s: from the request to the server to its last byte.
        first_token_s: from the request to the server to its first token (streams only).
    """

    load_s: float = 0.0
    total_s: float = 0.0
    upstream_s: float = 0.0
    first_token_s: float | None = None


def ollama_time(epoch_s: float) -> str:
    """``created_at`` as Ollama writes it: RFC 3339 in UTC with microseconds
    (``2024-06-01T12:00:00.123456Z``), for a wall-clock time in seconds since the epoch."""
    moment = datetime.datetime.fromtimestamp(epoch_s, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def done_reason(finish_reason: object) -> str:
    """Ollama's ``done_reason`` for an OpenAI ``finish_reason``: ``"length"`` stays,
    everything else that ends an answer (``stop``, ``tool_calls``, ...) is ``"stop"``."""
    return "length" if finish_reason == "length" else "stop"


def error_message(document: object) -> str | None:
    """The message of an OpenAI-shaped error document (``{"error": {"message": ...}}``,
    or mlx_lm.server's ``{"error": "..."}``), None when it is no error."""
    if not isinstance(document, Mapping) or "error" not in document:
        return None
    error = document["error"]
    if isinstance(error, Mapping):
        return cut(str(error.get("message", error)), 2000)
    return cut(str(error), 2000)


def chat_reply(
    document: Mapping[str, Any], *, kind: Kind, model: str, created_at: str, timing: Timing
) -> dict[str, Any]:
    """The Ollama answer for a whole (not streamed) OpenAI completion ``document``."""
    choice = _first_choice(document)
    message = choice.get("message")
    said = message if isinstance(message, Mapping) else {}
    text = said.get("content") if "message" in choice else choice.get("text")
    reply = _head(model, created_at)
    reply |= _said(kind, _string(text), _string(said.get("reasoning_content")))
    if kind == "chat" and said.get("tool_calls"):
        reply["message"]["tool_calls"] = _ollama_tool_calls(said["tool_calls"])
    reply |= {"done": True, "done_reason": done_reason(choice.get("finish_reason"))}
    reply |= _measures(timing, document.get("usage"), document.get("timings"))
    return reply


def load_reply(*, model: str, created_at: str, kind: Kind) -> dict[str, Any]:
    """The answer to a request that only asks for a model to be loaded: ``done_reason``
    ``"load"`` (once it is loaded: the front door had the instance granted)."""
    return _head(model, created_at) | _said(kind, "", "") | {"done": True, "done_reason": "load"}


def embed_reply(document: Mapping[str, Any], *, model: str, timing: Timing) -> dict[str, Any]:
    """The ``/api/embed`` answer for an OpenAI ``/v1/embeddings`` answer ``document``."""
    data = document.get("data")
    items = sorted(
        (item for item in data if isinstance(item, Mapping)) if isinstance(data, list) else (),
        key=lambda item: item.get("index", 0) if isinstance(item.get("index"), int) else 0,
    )
    reply: dict[str, Any] = {"model": model, "embeddings": [i.get("embedding") for i in items]}
    reply["total_duration"] = _ns(timing.total_s)
    reply["load_duration"] = _ns(timing.load_s)
    usage = document.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
    if _count(prompt):
        reply["prompt_eval_count"] = prompt
    return reply


@attrs.define
class StreamTranslation:
    """One streamed answer being translated (module docstring): feed it each server-sent
    event's JSON, then ask it for the last line."""

    kind: Kind
    model: str
    finish_reason: str | None = None
    error: str | None = None
    usage: object = None
    timings: object = None
    _calls: dict[int, dict[str, str]] = attrs.Factory(dict)

    def feed(self, event: object, created_at: str) -> list[dict[str, Any]]:
        """The lines one event of the server's stream becomes (none for a chunk that says
        nothing). An error event sets `error` and gives no line: the stream must then end
        with that error."""
        if (message := error_message(event)) is not None:
            self.error = message
            return []
        if not isinstance(event, Mapping):
            return []
        self.usage = event.get("usage") or self.usage
        self.timings = event.get("timings") or self.timings
        choice = _first_choice(event)
        if choice.get("finish_reason") is not None:
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") if "delta" in choice else {"content": choice.get("text")}
        said = delta if isinstance(delta, Mapping) else {}
        self._gather_calls(said.get("tool_calls"))
        text, thinking = _string(said.get("content")), _string(said.get("reasoning_content"))
        if not text and not thinking:
            return []
        return [_head(self.model, created_at) | _said(self.kind, text, thinking) | {"done": False}]

    def last_line(self, created_at: str, timing: Timing) -> dict[str, Any] | None:
        """The ``"done": true`` line, or None when the server never said why it stopped
        (or said an error): the stream was cut, and must end with an error line."""
        if self.finish_reason is None or self.error is not None:
            return None
        line = _head(self.model, created_at) | _said(self.kind, "", "")
        if self._calls and self.kind == "chat":
            calls = [{"function": call} for _, call in sorted(self._calls.items())]
            line["message"]["tool_calls"] = _ollama_tool_calls(calls)
        line |= {"done": True, "done_reason": done_reason(self.finish_reason)}
        return line | _measures(timing, self.usage, self.timings)

    def _gather_calls(self, calls: object) -> None:
        """Streamed tool calls come in pieces (the arguments a few characters at a time);
        Ollama gives each whole, so they are put together and sent with the last line."""
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
                continue
            index = call.get("index", 0) if isinstance(call.get("index"), int) else 0
            gathered = self._calls.setdefault(index, {"name": "", "arguments": ""})
            function = call["function"]
            gathered["name"] += _string(function.get("name"))
            gathered["arguments"] += _string(function.get("arguments"))


# ---- the parts ---------------------------------------------------------------------------


def _head(model: str, created_at: str) -> dict[str, Any]:
    return {"model": model, "created_at": created_at}


def _said(kind: Kind, text: str, thinking: str) -> dict[str, Any]:
    if kind == "generate":
        return {"response": text} | ({"thinking": thinking} if thinking else {})
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if thinking:
        message["thinking"] = thinking
    return {"message": message}


def _first_choice(document: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = document.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return {}


def _ollama_tool_calls(calls: object) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments as a JSON string) as Ollama's (arguments as an object;
    text that is not a JSON object is kept as it is)."""
    out = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments: object = function.get("arguments", "")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments else {}
            except ValueError:
                pass
        out.append({"function": {"name": _string(function.get("name")), "arguments": arguments}})
    return out


def _measures(timing: Timing, usage: object, timings: object) -> dict[str, Any]:
    out: dict[str, Any] = {
        "total_duration": _ns(timing.total_s),
        "load_duration": _ns(timing.load_s),
    }
    prompt_n, eval_n = _counts(usage, timings)
    prompt_s, eval_s = _phases(timing, timings)
    if prompt_n is not None:
        out["prompt_eval_count"] = prompt_n
    out["prompt_eval_duration"] = _ns(prompt_s)
    if eval_n is not None:
        out["eval_count"] = eval_n
    out["eval_duration"] = _ns(eval_s)
    return out


def _counts(usage: object, timings: object) -> tuple[int | None, int | None]:
    prompt = completion = None
    if isinstance(usage, Mapping):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(timings, Mapping):
        prompt = prompt if _count(prompt) else timings.get("prompt_n")
        completion = completion if _count(completion) else timings.get("predicted_n")
    return (prompt if _count(prompt) else None), (completion if _count(completion) else None)


def _phases(timing: Timing, timings: object) -> tuple[float, float]:
    """Prompt and generation time, float seconds: the server's own figures when it gave
    them, else the front door's measure (module docstring)."""
    if isinstance(timings, Mapping):
        prompt_ms, predicted_ms = (
            _milliseconds(timings.get("prompt_ms")),
            _milliseconds(timings.get("predicted_ms")),
        )
        if prompt_ms is not None and predicted_ms is not None:
            return prompt_ms / 1000.0, predicted_ms / 1000.0
    first = timing.first_token_s
    if first is None:
        return 0.0, timing.upstream_s
    return first, max(0.0, timing.upstream_s - first)


def _ns(seconds: float) -> int:
    return max(0, round(seconds * NS_PER_S))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _milliseconds(value: object) -> float | None:
    """``value`` when it is a sane count of milliseconds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < 1e12 else None


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""
