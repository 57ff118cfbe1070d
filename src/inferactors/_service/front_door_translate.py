"""Ollama's native API answered by llama-server and mlx_lm.server: the request goes out
translated to the OpenAI-compatible API (`inferactors._policy.ollama_requests`), and the
answer comes back translated to Ollama's shapes (`inferactors._policy.ollama_replies`).

`Translated` is a `GrantedAnswer`, so the grant ends exactly once and a client that leaves
closes the server's stream. A stream is translated event by event as each arrives (the
server's server-sent events are read with ``httpx-sse``), one NDJSON line per event that
says something; it ends with the ``"done": true`` line only when the server sent its last
event (``finish_reason``, then ``[DONE]``). A stream that breaks off, ends early, carries an
error or an event that is not JSON ends with one ``{"error": "..."}`` line instead. The
server's error answers come back as Ollama errors with the server's status and words.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx
import trio
from httpx_sse import EventSource, SSEError
from starlette.types import Send

from .._actors.front_door_seam import Grant
from .._edges.upstream import UpstreamClients
from .._errors import InvalidConfig, cut
from .._policy.dialects import Dialect, error_frame
from .._policy.ollama_replies import (
    Kind,
    StreamTranslation,
    Timing,
    chat_reply,
    embed_reply,
    error_message,
    ollama_time,
)
from .._safe_json import parse_json
from .front_door_relay import GrantedAnswer, Outbound, ReplyLimits, send_json

NDJSON_HEADERS = [
    (b"content-type", b"application/x-ndjson"),
    (b"x-accel-buffering", b"no"),
    (b"cache-control", b"no-cache"),
]

Shape = Literal["chat", "generate", "embed"]


def _now_text() -> str:
    return ollama_time(time.time())


class Translated(GrantedAnswer):
    """An Ollama request answered by an OpenAI-compatible server (module docstring).

    Args:
        shape: which Ollama endpoint asked (``chat``, ``generate``, ``embed``).
        model: the model name the client gave (Ollama answers with it).
        stream: whether the client asked for a stream.
        arrived_at: when the request arrived, ``trio.current_time()``.
        granted_at: when the instance was granted, ``trio.current_time()``.
        limits: how much of a whole answer is read.
        wall_clock: the ``created_at`` text of now (tests may fix it).
    """

    def __init__(
        self,
        grant: Grant,
        clients: UpstreamClients,
        outbound: Outbound,
        *,
        shape: Shape,
        model: str,
        stream: bool,
        arrived_at: float,
        granted_at: float,
        limits: ReplyLimits,
        wall_clock: Callable[[], str] = _now_text,
    ) -> None:
        super().__init__(grant, Dialect.OLLAMA, clients, outbound)
        self.shape = shape
        self.model = model
        self.stream = stream
        self.arrived_at = arrived_at
        self.granted_at = granted_at
        self.limits = limits
        self.wall_clock = wall_clock

    async def answer(self, send: Send) -> None:
        sent_at = trio.current_time()
        answer = await self.open_upstream(send)
        if answer is None:
            return
        if self.stream and answer.status_code < 400:
            await self._stream(send, answer, sent_at)
            return
        body = await self.read_whole(answer, self.limits)
        role = self.grant.upstream.role
        if body is None:
            words = self.broken(f"model {role!r}: {self.read_failure}")
            await self.send_error(send, 502, words, should_retry=False)
            return
        document = _document(body)
        if answer.status_code >= 400 or document is None:
            why = error_message(document) or cut(body.decode("utf-8", errors="replace"), 2000)
            status = answer.status_code if answer.status_code >= 400 else 502
            message = f"model {role!r}: {why or f'HTTP {status}'}"
            done = answer.status_code < 400  # its work done, its answer no JSON: no retry
            await self.send_error(send, status, message, should_retry=False if done else None)
            return
        await send_json(send, 200, self._whole(document, sent_at))

    def _timing(self, sent_at: float, first_at: float | None = None) -> Timing:
        now = trio.current_time()
        return Timing(
            load_s=self.granted_at - self.arrived_at,
            total_s=now - self.arrived_at,
            upstream_s=now - sent_at,
            first_token_s=None if first_at is None else first_at - sent_at,
        )

    def _whole(self, document: dict[str, Any], sent_at: float) -> dict[str, Any]:
        timing = self._timing(sent_at)
        if self.shape == "embed":
            return embed_reply(document, model=self.model, timing=timing)
        kind: Kind = self.shape
        return chat_reply(
            document, kind=kind, model=self.model, created_at=self.wall_clock(), timing=timing
        )

    async def _stream(self, send: Send, answer: httpx.Response, sent_at: float) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": NDJSON_HEADERS})
        kind: Kind = "chat" if self.shape == "chat" else "generate"
        translation = StreamTranslation(kind, self.model)
        first_at: float | None = None
        role = self.grant.upstream.role
        finished = False
        try:
            async for event in EventSource(answer).aiter_sse():
                if translation.error is not None:
                    break
                if finished:
                    continue  # read on to its end: the server closes the stream after it
                if event.data.strip() == "[DONE]":
                    finished = True
                    continue
                first_at = await self._translate(send, translation, event.data, first_at)
        except (httpx.TransportError, SSEError) as error:
            finished = False
            translation.error = (
                f"the server's stream broke off: {type(error).__name__}: {cut(str(error))}"
            )
        last = None
        if finished:
            last = translation.last_line(self.wall_clock(), self._timing(sent_at, first_at))
        if last is None:
            why = translation.error or "the server's stream ended before its last event"
            frame = error_frame(Dialect.OLLAMA, self.broken(f"model {role!r}: {why}"))
            await send({"type": "http.response.body", "body": frame, "more_body": False})
            return
        await _line(send, last, more=False)

    async def _translate(
        self, send: Send, translation: StreamTranslation, data: str, first_at: float | None
    ) -> float | None:
        """Send the lines of one event; the time of the first token, once there is one."""
        document = _document(data.encode())
        if document is None:
            translation.error = f"an event that is not JSON: {cut(data)}"
            return first_at
        lines = translation.feed(document, self.wall_clock())
        if translation.error is not None:
            return first_at
        if lines and first_at is None:
            first_at = trio.current_time()
        for line in lines:
            await _line(send, line)
        return first_at


async def _line(send: Send, line: dict[str, Any], *, more: bool = True) -> None:
    body = json.dumps(line, separators=(",", ":")).encode() + b"\n"
    await send({"type": "http.response.body", "body": body, "more_body": more})


def _document(body: bytes) -> dict[str, Any] | None:
    try:
        document = parse_json(body)
    except InvalidConfig:
        return None
    return document if isinstance(document, dict) else None
