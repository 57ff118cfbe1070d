"""Server-sent events over ASGI, on trio: `EventStream`, a response whose body is the
``text/event-stream`` format (https://html.spec.whatwg.org/multipage/server-sent-events.html),
written by a producer for as long as it runs or the client stays.

Each event is ``event: <name>`` and one ``data:`` line of compact JSON (JSON escapes every
line break, so one line always holds it), then a blank line. The producer runs beside a
task that waits for the client's ``http.disconnect``: when the client leaves, the producer
is cancelled (its subscriptions closed by its own ``with`` blocks); when the producer
returns, the body ends cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .client_gone import cancelled_when_gone

EVENT_STREAM = "text/event-stream"


class SseSender:
    """What a producer writes with: one event at a time."""

    def __init__(self, send: Send) -> None:
        self._send = send

    async def event(self, name: str, data: Any) -> None:
        """Send the event ``name`` carrying ``data`` (JSON-ready)."""
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        body = f"event: {name}\ndata: {text}\n\n".encode()
        await self._send({"type": "http.response.body", "body": body, "more_body": True})


Producer = Callable[[SseSender], Awaitable[None]]


class EventStream(Response):
    """A ``200 text/event-stream`` answer written by ``produce`` (module docstring); not
    cached, not buffered by a proxy."""

    def __init__(self, produce: Producer) -> None:
        # as starlette's StreamingResponse: no body, hence no Content-Length (chunked)
        self.status_code = 200
        self.media_type = EVENT_STREAM
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self.produce = produce

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        await send(start)
        async with cancelled_when_gone(receive) as client:
            await self.produce(SseSender(send))
        if not client.gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
