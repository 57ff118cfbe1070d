"""The behaviour of the fake Ollama: routes, replies, loads and faults (no sockets).

`FakeOllama.respond` answers one request as Ollama would; the
bookkeeping of models and expiry is `inferactors.testing._fake_ollama_state`; the HTTP
framing and the command line are `inferactors.testing.fake_ollama`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import httpx
import trio

from .._config.ollama_names import same_ollama_name
from ._fake_ollama_state import (
    BadDuration,
    ModelBook,
    PulledModel,
    Runner,
    full_name,
    keep_alive_seconds,
)

CLOUD_HOST = "https://ollama.com:443"
"""The ``remote_host`` the fake lists its cloud models with."""

_WORDS = ("Hello", " from", " the", " fake", " Ollama", ".")
_JSON = "application/json; charset=utf-8"
NDJSON = "application/x-ndjson"
"""The content type of Ollama's streamed answers (one JSON document a line)."""


@attrs.frozen
class FakeOllamaConfig:
    """What the fake serves and which faults it injects; durations are float seconds.

    Attributes:
        models: pulled tags (``"tiny"`` is ``"tiny:latest"``); nothing else can load.
        version: what ``/api/version`` reports.
        default_keep_alive: keep_alive of a fresh load that names none (Ollama's ``5m``).
        load_delay_s: how long each load takes.
        load_error: if set, every load fails after the delay with this text as
            ``{"error": text}`` and status ``load_error_status``; nothing is loaded.
        load_error_status: HTTP status of the failed load (500).
        unload_linger_s: how long an unloaded model stays in ``/api/ps`` (FC-21).
        preloaded: tags loaded by "someone else" before the fake starts (also pulled).
        preloaded_keep_alive: their keep_alive (forever by default).
        cloud: cloud models (``"gpt-oss:120b-cloud"``): pulled, listed by ``/api/tags`` with
            `CLOUD_HOST` as ``remote_host`` and their name as ``remote_model``.
        cut_stream_after: send only this many bytes of each streamed (NDJSON) answer's body,
            then close the connection: Ollama killed mid-answer, possibly inside a line.
    """

    models: tuple[str, ...] = ("tiny:latest",)
    version: str = "0.5.1"
    default_keep_alive: str | int = "5m"
    load_delay_s: float = 0.0
    load_error: str | None = None
    load_error_status: int = 500
    unload_linger_s: float = 0.0
    preloaded: tuple[str, ...] = ()
    preloaded_keep_alive: str | int = -1
    cloud: tuple[str, ...] = ()
    cut_stream_after: int | None = None


@attrs.frozen
class FakeRequest:
    """One request the fake received: ``method``, ``path`` (no query) and ``json``, the
    parsed body (None when empty or not JSON)."""

    method: str
    path: str
    json: object


@attrs.frozen
class FakeReply:
    """An answer: HTTP ``status``, ``body`` bytes and their ``content_type``."""

    status: int
    body: bytes = b""
    content_type: str = _JSON


@attrs.define(eq=False)
class FakeOllama:
    """A fake Ollama daemon; `open_fake_ollama` serves one, `transport` reaches one socketless.

    Attributes:
        config: settings and faults, read at each use (replace it to change faults).
        book: its models and runners (`inferactors.testing._fake_ollama_state.ModelBook`).
        wall_anchor, trio_anchor: the calendar time shown for trio time ``trio_anchor``.
        port: where it listens on 127.0.0.1 once served (0 before).
        requests: every request received, in order.
    """

    config: FakeOllamaConfig
    book: ModelBook
    wall_anchor: datetime
    trio_anchor: float
    port: int = 0
    requests: list[FakeRequest] = attrs.Factory(list)
    _load_lock: trio.Lock = attrs.Factory(trio.Lock)

    @classmethod
    def create(cls, config: FakeOllamaConfig, wall_anchor: datetime | None = None) -> FakeOllama:
        """A fake with ``config.preloaded`` already resident. Call inside trio.

        ``wall_anchor`` is the calendar time shown for the current trio time (``expires_at``
        and ``created_at`` are computed from it); the system's now by default, read once,
        since every later time comes from trio.
        """
        book = ModelBook.create(config.models + config.preloaded + config.cloud)
        now = trio.current_time()
        for tag in config.preloaded:
            book.preload(full_name(tag), _keep(config.preloaded_keep_alive), now)
        anchor = wall_anchor if wall_anchor is not None else datetime.now(UTC)
        return cls(config, book, anchor, now)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def resident(self) -> tuple[str, ...]:
        """Names ``/api/ps`` would list now, latest expiry first."""
        self._sweep()
        return tuple(runner.name for runner, _ in self.book.listed(trio.current_time()))

    def wall(self, trio_time: float) -> datetime:
        """The calendar time (UTC) shown for ``trio_time``."""
        return self.wall_anchor + timedelta(seconds=trio_time - self.trio_anchor)

    def transport(self) -> httpx.MockTransport:
        """An httpx transport that hands each request straight to `respond`, with no socket.

        Use it under ``MockClock``: a request cancelled by the client's timeout cancels the
        work as a disconnect would (a cancelled load leaves nothing loaded, FC-18), and no
        kernel socket can let the autojumping clock run ahead.
        """

        async def handle(request: httpx.Request) -> httpx.Response:
            body = await request.aread()
            reply = await self.respond(request.method, request.url.raw_path.decode(), body)
            headers = {"content-type": reply.content_type}
            return httpx.Response(reply.status, content=reply.body, headers=headers)

        return httpx.MockTransport(handle)

    async def respond(self, method: str, target: str, body: bytes) -> FakeReply:
        """Record the request and answer it (may wait: loads take ``load_delay_s``)."""
        path = target.split("?", 1)[0]
        self.requests.append(FakeRequest(method, path, _parse_json(body)))
        self._sweep()
        match method, path:
            case ("GET" | "HEAD", "/"):
                return FakeReply(200, b"Ollama is running", "text/plain; charset=utf-8")
            case ("GET" | "HEAD", "/api/version"):
                return _json(200, {"version": self.config.version})
            case ("GET", "/api/tags"):
                return _json(200, {"models": [self._tag_entry(m) for m in self._pulled()]})
            case ("GET", "/api/ps"):
                return _json(200, {"models": self._ps_entries()})
            case ("POST", "/api/generate"):
                return await self._generate(_parse_json(body))
            case ("POST", "/v1/chat/completions"):
                return await self._chat(_parse_json(body))
        return FakeReply(404, b"404 page not found", "text/plain")

    async def _generate(self, request: object) -> FakeReply:
        if not isinstance(request, dict):
            return _json(400, {"error": "invalid request body"})
        model, keep = request.get("model"), request.get("keep_alive")
        if not isinstance(model, str) or not model:
            return _json(400, {"error": "model is required"})
        try:
            duration_s = keep_alive_seconds(keep)
        except BadDuration as exc:
            return _json(400, {"error": str(exc)})
        pulled = self.book.find(model)
        if pulled is None:
            return _json(404, {"error": f"model '{model}' not found"})
        prompt = request.get("prompt") or ""
        if not prompt and duration_s == 0:
            self.book.expire(pulled.name, trio.current_time(), self.config.unload_linger_s)
            return _json(200, self._done(model, "unload"))
        return await self._with_runner(pulled, duration_s, lambda: self._generated(model, request))

    async def _chat(self, request: object) -> FakeReply:
        if not isinstance(request, dict) or not isinstance(request.get("model"), str):
            return _openai_error(400, "model is required")
        model = str(request["model"])
        if request.get("stream") is True:
            return _openai_error(400, "the fake Ollama does not stream chat completions")
        pulled = self.book.find(model)
        if pulled is None:
            return _openai_error(404, f'model "{model}" not found, try pulling it first')
        limit = request.get("max_completion_tokens", request.get("max_tokens"))
        return await self._with_runner(pulled, None, lambda: self._chat_reply(model, limit))

    async def _with_runner(
        self, pulled: PulledModel, duration_s: float | None, answer: Callable[[], FakeReply]
    ) -> FakeReply:
        runner = await self._acquire(pulled.name, duration_s)
        if isinstance(runner, FakeReply):
            return runner
        try:
            return answer()
        finally:
            self.book.release(runner, trio.current_time(), self.config.unload_linger_s)

    async def _acquire(self, name: str, duration_s: float | None) -> Runner | FakeReply:
        """The loaded runner for ``name`` with one more reference, loading it if needed."""
        async with self._load_lock:
            runner = self._live(name)
            if runner is not None and runner.gone_at is not None:
                await trio.sleep_until(runner.gone_at)  # an unloading model: wait it out
                runner = self._live(name)  # gone now: only loads (under this lock) add runners
            if runner is not None:
                self.book.use(runner, duration_s)
                return runner
            return await self._load(name, duration_s)

    async def _load(self, name: str, duration_s: float | None) -> Runner | FakeReply:
        config = self.config
        runner = self.book.start_load(name, _or_default(duration_s, config.default_keep_alive))
        loaded = False
        try:  # a cancelled load (the client went away, FC-18) leaves nothing loaded
            await trio.sleep(config.load_delay_s)
            loaded = config.load_error is None
        finally:
            if not loaded:
                self.book.drop(runner)
        if config.load_error is not None:
            return _json(config.load_error_status, {"error": config.load_error})
        runner.loading = False
        return runner

    def _live(self, name: str) -> Runner | None:
        self._sweep()
        return self.book.runners.get(name)

    def _sweep(self) -> None:
        self.book.sweep(trio.current_time(), self.config.unload_linger_s)

    def _pulled(self) -> list[PulledModel]:
        return list(self.book.pulled.values())

    def _tag_entry(self, model: PulledModel) -> dict[str, object]:
        return {
            "name": model.name,
            "model": model.name,
            "modified_at": _iso(self.wall_anchor),
            "size": model.size,
            "digest": model.digest,
            "details": _DETAILS,
        } | self._remote(model)

    def _remote(self, model: PulledModel) -> dict[str, object]:
        if not any(same_ollama_name(model.name, cloud) for cloud in self.config.cloud):
            return {}
        return {"remote_model": model.name, "remote_host": CLOUD_HOST}

    def _ps_entries(self) -> list[dict[str, object]]:
        entries: list[dict[str, object]] = []
        for runner, expires_at in self.book.listed(trio.current_time()):
            model = self.book.pulled[runner.name]
            entry = self._tag_entry(model)
            del entry["modified_at"]
            entry.update(expires_at=_iso(self.wall(expires_at)), size_vram=model.size)
            entry["context_length"] = 4096
            entries.append(entry)
        return entries

    def _done(self, model: str, reason: str) -> dict[str, object]:
        created_at = _iso(self.wall(trio.current_time()))
        return {
            "model": model,
            "created_at": created_at,
            "response": "",
            "done": True,
            "done_reason": reason,
        }

    def _generated(self, model: str, request: dict[str, object]) -> FakeReply:
        if not request.get("prompt"):
            return _json(200, self._done(model, "load"))
        options = request.get("options")
        limit = options.get("num_predict") if isinstance(options, dict) else None
        words, reason = _words(limit)
        final = self._done(model, reason) | {"response": "".join(words)}
        final |= {"prompt_eval_count": 1, "eval_count": len(words), "total_duration": 1000}
        if request.get("stream") is False:
            return _json(200, final)
        return _ndjson(self._chunks(model, words, final))

    def _chunks(
        self, model: str, words: tuple[str, ...], final: dict[str, object]
    ) -> list[dict[str, object]]:
        created_at = _iso(self.wall(trio.current_time()))
        chunks: list[dict[str, object]] = [
            {"model": model, "created_at": created_at, "response": word, "done": False}
            for word in words
        ]
        return [*chunks, final | {"response": ""}]

    def _chat_reply(self, model: str, limit: object) -> FakeReply:
        words, reason = _words(limit)
        created = int(self.wall(trio.current_time()).timestamp())
        message = {"role": "assistant", "content": "".join(words)}
        usage = {"prompt_tokens": 1, "completion_tokens": len(words)}
        return _json(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_ollama",
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": usage | {"total_tokens": 1 + len(words)},
            },
        )


_DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "llama",
    "families": ["llama"],
    "parameter_size": "1M",
    "quantization_level": "F32",
}


def _parse_json(body: bytes) -> object:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _json(status: int, document: object) -> FakeReply:
    return FakeReply(status, json.dumps(document).encode())


def _ndjson(documents: list[dict[str, object]]) -> FakeReply:
    lines = "".join(json.dumps(document) + "\n" for document in documents)
    return FakeReply(200, lines.encode(), NDJSON)


def _openai_error(status: int, message: str) -> FakeReply:
    error = {"message": message, "type": "api_error", "param": None, "code": None}
    return _json(status, {"error": error})


def _words(limit: object) -> tuple[tuple[str, ...], str]:
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < len(_WORDS):
        return _WORDS[:limit], "length"
    return _WORDS, "stop"


def _keep(value: str | int) -> float:
    seconds = keep_alive_seconds(value)
    return 300.0 if seconds is None else seconds


def _or_default(duration_s: float | None, default: str | int) -> float:
    return duration_s if duration_s is not None else _keep(default)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
