"""The front door's answers that hold a grant: the request goes to the granted server and
its answer comes back, each ending the grant exactly once.

`GrantedAnswer` is the frame every such answer shares (an ASGI response): while it runs,
a task waits for the client's disconnect and cancels the rest; whatever happens (the last
byte sent, the client gone, the server failed, a bug), the server's answer is closed (a
stream cut short closes its connection, which tells the server to stop generating) and
`Grant.done` is called exactly once, in that order.

`PassThrough` sends the server's answer on as it is:

- a stream (``text/event-stream``, ``application/x-ndjson``) frame by frame, each event
  (or NDJSON line) sent as soon as it is whole (`inferactors._policy.stream_frames`), with
  ``X-Accel-Buffering: no`` so no reverse proxy in front buffers it either. When the
  server's connection breaks, or ends cleanly without the stream's last event
  (`inferactors._policy.stream_end`), the half-received frame is dropped and the client gets
  one error frame in its dialect (`inferactors._policy.dialects.error_frame`), starting on a
  frame boundary, and nothing after it: never a made-up ``[DONE]``. A frame longer than
  `ReplyLimits.max_bytes` ends the stream the same way;
- any other answer read whole (at most `ReplyLimits.max_bytes`) and then sent with its
  length, so a server that fails halfway gives a clean 502 in the dialect rather than a
  cut body. An error answer whose body is not in the dialect's shape (mlx_lm.server's
  ``{"error": "..."}``) is put in it, with the server's own words.

A server that cannot be reached, or ends the connection without an answer, is a 502 in
the dialect, and one that says nothing within the read timeout a 504, naming the instance
and the cause. (A request is sent twice only when a kept connection ended before the
server could read it: `inferactors._edges.upstream`.)

**No client retry repeats the server's work.** The ``openai`` client sends a request again
on its own after any 5xx, unless the answer says ``x-should-retry: false`` (it obeys that
header before its own rule). So every 5xx of ours that comes after the request may have
reached the server (it ended the connection without an answer, its answer broke off or was
too large, it said nothing within the read timeout) says ``x-should-retry: false``: a
retry would run the generation again. One where nothing reached a server (it could not be
connected to) says ``x-should-retry: true``. A server's own error answer is passed on with
its own headers.

**A stop that outlasts its drain** (an operator's, a reload's, the shutdown's) ends the
server under a request still in flight: the error (an error frame, or a 502) then says that
stop in our words (`Grant.cut_by`: ``the instance was stopped by an operator before this
answer ended (drain timed out)``) rather than what the broken connection looked like.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .._actors.front_door_seam import Grant, Upstream
from .._edges.upstream import UpstreamClients
from .._errors import InvalidConfig, cut
from .._policy.dialects import Dialect, error_document, error_frame
from .._policy.model_echo import echo_model
from .._policy.ollama_replies import error_message
from .._policy.stream_end import StreamEnd, ended_whole
from .._policy.stream_frames import NDJSON_ENDS, SSE_ENDS, StreamFrames
from .._safe_json import parse_json
from .client_gone import cancelled_when_gone
from .json_answer import JsonAnswer

MiB = 1024 * 1024
STREAM_TYPES = ("text/event-stream", "application/x-ndjson")
CLOSE_S = 2.0
"""How long closing a server's answer may take once the request is over, float seconds."""
TAIL_CHUNKS = 3
"""How many of a stream's last chunks are kept to read its last event."""
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-encoding",
        "date",
        "server",
    }
)
"""Headers of a server's answer that are not passed on (they belong to one connection, or
are set again for the client's)."""
_STREAM_SET = frozenset({b"x-accel-buffering", b"cache-control"})
"""Headers a stream's answer sets itself."""


@attrs.frozen
class ReplyLimits:
    """How much of a server's whole (not streamed) answer the front door reads.

    Attributes:
        max_bytes: the largest answer passed on, bytes (larger: 502).
    """

    max_bytes: int = 256 * MiB


@attrs.frozen
class Outbound:
    """One request to a server.

    Attributes:
        method: the HTTP method.
        target: the path and query on the server.
        body: the body.
        headers: the headers sent (the server's API key is added from the grant).
    """

    method: str
    target: str
    body: bytes = b""
    headers: Mapping[str, str] = attrs.field(factory=dict)


def is_stream(answer: httpx.Response) -> bool:
    """Whether the server's answer is a stream (module docstring)."""
    media = answer.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media in STREAM_TYPES


def upstream_headers(upstream: Upstream, headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the server's own API key (when it has one) as the bearer token."""
    out = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    if upstream.api_key is not None:
        out["Authorization"] = f"Bearer {upstream.api_key}"
    return out


class GrantedAnswer(Response):
    """An answer that holds a grant (module docstring); subclasses write `answer`."""

    def __init__(
        self, grant: Grant, dialect: Dialect, clients: UpstreamClients, outbound: Outbound
    ) -> None:
        super().__init__()
        self.grant = grant
        self.dialect = dialect
        self.clients = clients
        self.outbound = outbound
        self.opened: httpx.Response | None = None
        self.read_failure = ""
        """Why `read_whole` gave None, in words."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with cancelled_when_gone(receive):
                await self.answer(send)
        finally:
            try:
                await self._close_upstream()
            finally:
                self.grant.done()

    async def answer(self, send: Send) -> None:
        """Send the whole answer to the client (`PassThrough`, or a translation)."""
        raise NotImplementedError

    async def open_upstream(self, send: Send) -> httpx.Response | None:
        """Send the request to the server; None when it failed, after a 502 or 504 in the
        dialect was sent to the client."""
        upstream, outbound = self.grant.upstream, self.outbound
        headers = upstream_headers(upstream, outbound.headers)
        try:
            self.opened = await self.clients.open(
                upstream.base_url,
                outbound.method,
                outbound.target,
                body=outbound.body,
                headers=headers,
            )
        except httpx.TimeoutException as error:
            words = self.broken(f"model {upstream.role!r}: no answer in time ({_words(error)})")
            sent = not isinstance(error, httpx.ConnectTimeout | httpx.PoolTimeout)
            await self.send_error(send, 504, words, should_retry=not sent)
            return None
        except httpx.TransportError as error:
            reached = not isinstance(error, httpx.ConnectError)
            words = self.broken(_unreachable(upstream, error))
            await self.send_error(send, 502, words, should_retry=not reached)
            return None
        return self.opened

    async def read_whole(self, answer: httpx.Response, limits: ReplyLimits) -> bytes | None:
        """The server's whole answer body, or None when it broke off or was too large (the
        caller sends a 502 then: see `read_failure`)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in answer.aiter_raw():
                size += len(chunk)
                if size > limits.max_bytes:
                    self.read_failure = f"its answer is larger than {limits.max_bytes} bytes"
                    return None
                chunks.append(chunk)
        except httpx.TransportError as error:
            self.read_failure = f"its answer broke off: {_words(error)}"
            return None
        return b"".join(chunks)

    async def send_error(
        self, send: Send, status: int, message: str, *, should_retry: bool | None
    ) -> None:
        """Send a whole error answer in the dialect; ``should_retry`` (when not None) as
        ``x-should-retry`` (module docstring)."""
        document = error_document(self.dialect, status, message)
        await send_json(send, status, document, retry_header(should_retry))

    def broken(self, words: str) -> str:
        """Why the server's answer failed: ``words`` (what the connection or the stream
        showed), or, when a stop cut the instance under this request, that stop
        (`Grant.cut_by`)."""
        stop = self.grant.cut_by()
        return words if stop is None else f"model {self.grant.upstream.role!r}: {stop}"

    async def _close_upstream(self) -> None:
        if self.opened is None:
            return
        with trio.move_on_after(CLOSE_S) as scope:
            scope.shield = True
            await self.opened.aclose()


class PassThrough(GrantedAnswer):
    """The server's answer sent on as it is (module docstring).

    Args:
        end: how a whole stream of this route ends.
        limits: how much of a whole answer is read.
    """

    def __init__(
        self,
        grant: Grant,
        dialect: Dialect,
        clients: UpstreamClients,
        outbound: Outbound,
        *,
        end: StreamEnd,
        limits: ReplyLimits,
        model: str | None = None,
    ) -> None:
        super().__init__(grant, dialect, clients, outbound)
        self.end = end
        self.limits = limits
        self.model = model

    async def answer(self, send: Send) -> None:
        answer = await self.open_upstream(send)
        if answer is None:
            return
        if is_stream(answer):
            await self._stream(send, answer)
        else:
            await self._whole(send, answer)

    async def _stream(self, send: Send, answer: httpx.Response) -> None:
        passed = [(k, v) for k, v in _passed_headers(answer) if k not in _STREAM_SET]
        headers = [
            *passed,
            (b"x-accel-buffering", b"no"),
            (b"cache-control", b"no-cache"),
        ]
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": headers}
        )
        tail: deque[bytes] = deque(maxlen=TAIL_CHUNKS)
        frame_dialect = _frame_dialect(self.dialect, answer)
        frames = StreamFrames(SSE_ENDS if frame_dialect.streams_sse else NDJSON_ENDS)
        role = self.grant.upstream.role
        try:
            async for chunk in answer.aiter_raw():
                tail.append(chunk)
                if whole := frames.feed(chunk):
                    await self._pass_on(send, whole)
                if frames.held > self.limits.max_bytes:
                    words = f"an event of its stream is longer than {self.limits.max_bytes} bytes"
                    await _end_with(send, error_frame(frame_dialect, f"model {role!r}: {words}"))
                    return
        except httpx.TransportError as error:
            words = self.broken(f"model {role!r}: the server's stream broke off: {_words(error)}")
            await _end_with(send, error_frame(frame_dialect, words))  # the partial frame dropped
            return
        rest = frames.rest()
        if not ended_whole(self.end, b"".join(tail)):
            words = self.broken(
                f"model {role!r}: the server's stream ended before its "
                "last event (the server stopped or died mid-answer)"
            )
            await _end_with(send, error_frame(frame_dialect, words))  # the partial frame dropped
            return
        if rest:
            await self._pass_on(send, rest)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pass_on(self, send: Send, frames: bytes) -> None:
        """Send whole frames of the stream, naming the model the client asked for."""
        body = frames if self.model is None else echo_model(frames, self.model)
        await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _whole(self, send: Send, answer: httpx.Response) -> None:
        body = await self.read_whole(answer, self.limits)
        role = self.grant.upstream.role
        if body is None:
            words = self.broken(f"model {role!r}: {self.read_failure}")
            await self.send_error(send, 502, words, should_retry=False)
            return
        if answer.status_code >= 400:
            body = _in_dialect(self.dialect, answer.status_code, body)
        elif self.model is not None:
            body = echo_model(body, self.model)
        headers = [*_passed_headers(answer), (b"content-length", str(len(body)).encode())]
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


def retry_header(should_retry: bool | None) -> dict[str, str]:
    """``x-should-retry`` saying ``should_retry``; nothing when it is None (module
    docstring)."""
    if should_retry is None:
        return {}
    return {"x-should-retry": "true" if should_retry else "false"}


async def send_json(
    send: Send, status: int, document: object, headers: Mapping[str, str] | None = None
) -> None:
    """Send a whole JSON answer, with ``headers``."""
    response = JsonAnswer(document, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body, "more_body": False})


async def _end_with(send: Send, frame: bytes) -> None:
    await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _passed_headers(answer: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower(), value)
        for name, value in answer.headers.raw
        if name.decode("latin-1").lower() not in HOP_BY_HOP
    ]


def _frame_dialect(dialect: Dialect, answer: httpx.Response) -> Dialect:
    """The dialect of an error frame: the request's, but NDJSON lines for an NDJSON stream
    (``/upstream/NAME/...`` to an Ollama instance)."""
    ndjson = answer.headers.get("content-type", "").startswith("application/x-ndjson")
    return Dialect.OLLAMA if ndjson else dialect


def _in_dialect(dialect: Dialect, status: int, body: bytes) -> bytes:
    """A server's error body in the dialect's shape, with the server's own words; a body
    already in that shape is kept byte for byte."""
    try:
        document: Any = parse_json(body)
    except InvalidConfig:
        document = None
    message = error_message(document)
    shaped = isinstance(document, dict) and (
        isinstance(document.get("error"), dict) != (dialect is Dialect.OLLAMA)
    )
    if message is not None and shaped:
        return body
    words = message if message is not None else cut(body.decode("utf-8", errors="replace"), 2000)
    response = JsonAnswer(error_document(dialect, status, words or f"HTTP {status}"))
    return bytes(response.body)


def _words(error: httpx.TransportError) -> str:
    text = str(error)
    return f"{type(error).__name__}: {cut(text)}" if text else type(error).__name__


def _unreachable(upstream: Upstream, error: httpx.TransportError) -> str:
    """Why the request got no answer: the server could not be reached, or it was sent (once:
    `UpstreamClients.open`) and the server ended the connection without an answer."""
    where = f"its server at {upstream.base_url}"
    if isinstance(error, httpx.ConnectError):
        return f"model {upstream.role!r}: {where} cannot be reached ({_words(error)})"
    return f"model {upstream.role!r}: {where} did not answer the request ({_words(error)})"
