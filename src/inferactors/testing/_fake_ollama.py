"""A fake Ollama daemon for tests and examples: the documented HTTP API on loopback, with faults.

Speaks (server-apis.md section 3): ``GET|HEAD /`` ("Ollama is running"), ``GET|HEAD
/api/version``, ``GET /api/tags``, ``GET /api/ps`` (``expires_at``, latest first),
``POST /api/generate`` (load without a prompt, unload with keep_alive 0, completion with a
prompt and ``options.num_predict``) and ``POST /v1/chat/completions``. Everything else is
404. Models load on demand, one load at a time, and keep their keep_alive and expiry the way
Ollama does (see `inferactors.testing._fake_ollama_state`), on trio time, so MockClock drives
expiry, slow loads and lingering.

Faults (`FakeOllamaConfig`, read at each use, so a test may replace ``fake.config``): a
slow load, a load that fails with an error text (FC-19's runner timeout), a model that
lingers in ``/api/ps`` after an unload (FC-21), models already loaded by "someone else".
A load whose client disconnects before it finishes is aborted and leaves nothing loaded
(FC-18). Every request is recorded in ``fake.requests``.

In process: ``async with open_fake_ollama(models=("tiny",)) as fake: ...``. As a process
(loopback only, until interrupted)::

    python -m inferactors.testing._fake_ollama --port 11434 --model tiny

HTTP/1.1 framing is h11's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import attrs
import h11
import trio

from ._fake_ollama_state import (
    BadDuration,
    ModelBook,
    PulledModel,
    Runner,
    full_name,
    keep_alive_seconds,
)

_WORDS = ("Hello", " from", " the", " fake", " Ollama", ".")
_JSON = "application/json; charset=utf-8"


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


@attrs.frozen
class FakeRequest:
    """One request the fake received: ``method``, ``path`` (no query) and ``json``, the
    parsed body (None when empty or not JSON)."""

    method: str
    path: str
    json: object


@attrs.frozen
class _Reply:
    status: int
    body: bytes = b""
    content_type: str = _JSON


@attrs.define(eq=False)
class FakeOllama:
    """A running fake; ``base_url`` is where it listens on 127.0.0.1."""

    config: FakeOllamaConfig
    book: ModelBook
    wall_anchor: datetime
    trio_anchor: float
    port: int = 0
    requests: list[FakeRequest] = attrs.Factory(list)
    _load_lock: trio.Lock = attrs.Factory(trio.Lock)

    @classmethod
    def create(cls, config: FakeOllamaConfig, wall_anchor: datetime | None = None) -> FakeOllama:
        """A fake in state: ``config.preloaded`` resident. Call inside trio.

        ``wall_anchor`` is the calendar time shown for the current trio time (``expires_at``
        and ``created_at`` are computed from it); now, by default.
        """
        book = ModelBook.create(config.models + config.preloaded)
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

    async def respond(self, method: str, target: str, body: bytes) -> _Reply:
        """Record the request and answer it (may wait: loads take ``load_delay_s``)."""
        path = target.split("?", 1)[0]
        self.requests.append(FakeRequest(method, path, _parse_json(body)))
        self._sweep()
        match method, path:
            case ("GET" | "HEAD", "/"):
                return _Reply(200, b"Ollama is running", "text/plain; charset=utf-8")
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
        return _Reply(404, b"404 page not found", "text/plain")

    async def _generate(self, request: object) -> _Reply:
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

    async def _chat(self, request: object) -> _Reply:
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
        self, pulled: PulledModel, duration_s: float | None, answer: _Answer
    ) -> _Reply:
        runner = await self._acquire(pulled.name, duration_s)
        if isinstance(runner, _Reply):
            return runner
        try:
            return answer()
        finally:
            self.book.release(runner, trio.current_time(), self.config.unload_linger_s)

    async def _acquire(self, name: str, duration_s: float | None) -> Runner | _Reply:
        """The loaded runner for ``name`` with one more reference, loading it if needed."""
        async with self._load_lock:
            while (runner := self._live(name)) is not None and runner.gone_at is not None:
                await trio.sleep_until(runner.gone_at)  # an unloading model: wait it out
            if runner is not None:
                self.book.use(runner, duration_s)
                return runner
            return await self._load(name, duration_s)

    async def _load(self, name: str, duration_s: float | None) -> Runner | _Reply:
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
        }

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
        return {"model": model, "created_at": created_at, "response": "", "done": True} | {
            "done_reason": reason
        }

    def _generated(self, model: str, request: dict[str, object]) -> _Reply:
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

    def _chat_reply(self, model: str, limit: object) -> _Reply:
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


class _Answer:  # the shape of a reply builder, for mypy
    def __call__(self) -> _Reply: ...


@asynccontextmanager
async def open_fake_ollama(
    config: FakeOllamaConfig | None = None, **settings: object
) -> AsyncIterator[FakeOllama]:
    """Run a fake Ollama on a free 127.0.0.1 port for the block.

    Pass a `FakeOllamaConfig`, or its fields as keywords (``load_delay_s=30.0``,
    ``load_error="timed out waiting for llama runner to start - progress 0.00"``,
    ``unload_linger_s=3.0``, ``preloaded=("other",)``, ``models=("tiny",)``).
    """
    chosen = config if config is not None else FakeOllamaConfig(**settings)  # type: ignore[arg-type]  # keyword fields are checked by attrs at run time
    fake = FakeOllama.create(chosen)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_fake_ollama, fake, 0)
        fake.port = listeners[0].socket.getsockname()[1]
        yield fake
        nursery.cancel_scope.cancel()


async def serve_fake_ollama(
    fake: FakeOllama, port: int, *, task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``fake`` on 127.0.0.1:``port`` (0: any free port) until cancelled; the started
    value is trio's list of listeners."""
    await trio.serve_tcp(
        lambda stream: _serve_connection(fake, stream),
        port,
        host="127.0.0.1",
        task_status=task_status,
    )


async def _serve_connection(fake: FakeOllama, stream: trio.SocketStream) -> None:
    connection = h11.Connection(h11.SERVER)
    async with stream:
        try:
            await _exchange_all(fake, connection, stream)
        except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the client went away or spoke nonsense: drop the connection


async def _exchange_all(
    fake: FakeOllama, connection: h11.Connection, stream: trio.SocketStream
) -> None:
    while True:
        request = await _next_event(connection, stream)
        if not isinstance(request, h11.Request):
            return
        body = await _read_body(connection, stream)
        reply = await _respond_unless_gone(fake, connection, stream, request, body)
        if reply is None:
            return  # the client disconnected first: nobody to answer
        await _send(connection, stream, reply, head=request.method == b"HEAD")
        if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            return
        connection.start_next_cycle()


async def _respond_unless_gone(
    fake: FakeOllama,
    connection: h11.Connection,
    stream: trio.SocketStream,
    request: h11.Request,
    body: bytes,
) -> _Reply | None:
    """Answer the request, but cancel the work if the client disconnects meanwhile (Ollama
    aborts a load whose request context ends: "client connection closed before server
    finished loading, aborting load", FC-18)."""
    replies: list[_Reply] = []

    async def work() -> None:
        replies.append(await fake.respond(request.method.decode(), request.target.decode(), body))
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(work)
        nursery.start_soon(_cancel_on_eof, connection, stream, nursery.cancel_scope)
    return replies[0] if replies else None


async def _cancel_on_eof(
    connection: h11.Connection, stream: trio.SocketStream, scope: trio.CancelScope
) -> None:
    try:
        while data := await stream.receive_some(65536):
            connection.receive_data(data)  # pipelined bytes: keep them for the next cycle
    except trio.BrokenResourceError:
        pass  # a reset is a disconnect too
    scope.cancel()


async def _send(
    connection: h11.Connection, stream: trio.SocketStream, reply: _Reply, *, head: bool
) -> None:
    headers = [("content-type", reply.content_type), ("content-length", str(len(reply.body)))]
    events: list[h11.Event] = [h11.Response(status_code=reply.status, headers=headers)]
    if not head:
        events.append(h11.Data(data=reply.body))
    events.append(h11.EndOfMessage())
    for event in events:
        await stream.send_all(connection.send(event) or b"")


async def _read_body(connection: h11.Connection, stream: trio.SocketStream) -> bytes:
    chunks: list[bytes] = []
    while isinstance(event := await _next_event(connection, stream), h11.Data):
        chunks.append(bytes(event.data))
    return b"".join(chunks)


async def _next_event(connection: h11.Connection, stream: trio.SocketStream) -> object:
    while (event := connection.next_event()) is h11.NEED_DATA:
        connection.receive_data(await stream.receive_some(65536))
    return event


def _parse_json(body: bytes) -> object:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _json(status: int, document: object) -> _Reply:
    return _Reply(status, json.dumps(document).encode())


def _ndjson(documents: list[dict[str, object]]) -> _Reply:
    lines = "".join(json.dumps(document) + "\n" for document in documents)
    return _Reply(200, lines.encode(), "application/x-ndjson")


def _openai_error(status: int, message: str) -> _Reply:
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inferactors.testing._fake_ollama --port P --model NAME ...``: serve a fake
    Ollama on 127.0.0.1:P until interrupted."""
    args = _parser().parse_args(argv)
    config = FakeOllamaConfig(
        models=tuple(args.model or ["tiny:latest"]),
        version=args.ollama_version,
        load_delay_s=args.load_delay,
        load_error=args.load_error,
        unload_linger_s=args.unload_linger,
        preloaded=tuple(args.preloaded),
    )
    try:
        trio.run(_serve_forever, config, args.port)
    except KeyboardInterrupt:
        pass
    return 0


async def _serve_forever(config: FakeOllamaConfig, port: int) -> None:
    fake = FakeOllama.create(config)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_fake_ollama, fake, port)
        fake.port = listeners[0].socket.getsockname()[1]
        print(f"fake ollama listening on {fake.base_url}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inferactors.testing._fake_ollama",
        description="A fake Ollama daemon on 127.0.0.1 for tests and examples.",
    )
    parser.add_argument("--port", type=int, default=11434, help="TCP port (0: any free one)")
    parser.add_argument("--model", action="append", help="a pulled tag (repeatable)")
    parser.add_argument("--preloaded", action="append", default=[], help="already loaded tag")
    parser.add_argument("--ollama-version", default="0.5.1", help="what /api/version says")
    parser.add_argument("--load-delay", type=float, default=0.0, help="seconds each load takes")
    parser.add_argument("--load-error", help="fail every load with this error text (HTTP 500)")
    parser.add_argument("--unload-linger", type=float, default=0.0, help="seconds in /api/ps")
    return parser


if __name__ == "__main__":
    sys.exit(main())
