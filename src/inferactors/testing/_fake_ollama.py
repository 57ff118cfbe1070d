"""A fake Ollama daemon for tests and examples: the documented HTTP API on loopback, with faults.

Speaks: ``GET|HEAD /`` ("Ollama is running"), ``GET|HEAD
/api/version``, ``GET /api/tags``, ``GET /api/ps`` (``expires_at``, latest first),
``POST /api/generate`` (load without a prompt, unload with keep_alive 0, completion with a
prompt and ``options.num_predict``) and ``POST /v1/chat/completions``. Everything else is
404. Models load on demand, one load at a time, and keep their keep_alive and expiry the way
Ollama does (see `inferactors.testing._fake_ollama_state`), on trio time, so MockClock drives
expiry, slow loads and lingering.

Faults (`FakeOllamaConfig`, read at each use, so a test may replace ``fake.config``): a
slow load, a load that fails with an error text (FC-19's runner timeout), a model that
lingers in ``/api/ps`` after an unload (FC-21), models already loaded by "someone else", a
stream cut after so many bytes (inside a line).
A load whose client disconnects before it finishes is aborted and leaves nothing loaded
(FC-18). Every request is recorded in ``fake.requests``.

In process: ``async with open_fake_ollama(models=("tiny",)) as fake: ...``. As a process
(loopback only, until interrupted)::

    python -m inferactors.testing.fake_ollama --port 11434 --model tiny

HTTP/1.1 framing is h11's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import h11
import trio

from ._fake_ollama_api import NDJSON, FakeOllama, FakeOllamaConfig, FakeReply, FakeRequest

__all__ = [
    "FakeOllama",
    "FakeOllamaConfig",
    "FakeRequest",
    "open_fake_ollama",
    "serve_fake_ollama",
]


_REASONS = {status.value: status.phrase for status in HTTPStatus}


@asynccontextmanager
async def open_fake_ollama(
    config: FakeOllamaConfig | None = None, **settings: Any
) -> AsyncIterator[FakeOllama]:
    """Run a fake Ollama on a free 127.0.0.1 port for the block.

    Pass a `FakeOllamaConfig`, or its fields as keywords (``load_delay_s=30.0``,
    ``load_error="timed out waiting for llama runner to start - progress 0.00"``,
    ``unload_linger_s=3.0``, ``preloaded=("other",)``, ``models=("tiny",)``).
    """
    chosen = config if config is not None else FakeOllamaConfig(**settings)
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
        cut = fake.config.cut_stream_after
        await _send(connection, stream, reply, head=request.method == b"HEAD", cut_stream_after=cut)
        if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            return
        connection.start_next_cycle()


async def _respond_unless_gone(
    fake: FakeOllama,
    connection: h11.Connection,
    stream: trio.SocketStream,
    request: h11.Request,
    body: bytes,
) -> FakeReply | None:
    """Answer the request, but cancel the work if the client disconnects meanwhile (Ollama
    aborts a load whose request context ends: "client connection closed before server
    finished loading, aborting load", FC-18)."""
    replies: list[FakeReply] = []

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
    connection: h11.Connection,
    stream: trio.SocketStream,
    reply: FakeReply,
    *,
    head: bool,
    cut_stream_after: int | None = None,
) -> None:
    """Send ``reply``: a stream (NDJSON) in HTTP chunks as Ollama does, anything else with
    its length; a stream cut after ``cut_stream_after`` bytes of its body ends there (no
    last chunk), and the caller closes the connection."""
    streamed = reply.content_type == NDJSON
    length = [] if streamed else [("content-length", str(len(reply.body)))]
    headers = [("content-type", reply.content_type), *length]
    reason = _REASONS.get(reply.status, "")
    response = h11.Response(status_code=reply.status, headers=headers, reason=reason)
    events: list[h11.Event] = [response]
    body = reply.body
    cut = streamed and cut_stream_after is not None and cut_stream_after < len(body)
    if cut:
        body = body[:cut_stream_after]
    if not head and body:
        events.append(h11.Data(data=body))
    if not cut:
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
