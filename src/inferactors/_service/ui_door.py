"""``inferactors ui``'s server: the supervisor's web page on a loopback port of its own, for
the user who runs it (`serve_ui_door`).

The page stays the supervisor's: every request for one of the page's own paths
(``ui_paths.forwarded_path``: an allow-list checked on the path as sent, dot segments and
encoded separators refused) that passes this door's own guards is forwarded to the
supervisor's control socket (httpx over the Unix socket) and its answer streamed back as
it comes (the page's server-sent events included). The guards
are the TCP listener's (``control_access.py``): a loopback ``Host``, a browser's commands
from the same origin, and the bearer token, here one made for this door alone (random,
printed by ``inferactors ui`` in the page's address, never stored). The browser's own
headers (its token, cookies, ``Origin``) are not forwarded: on the socket, the supervisor
knows the door as its own user. Any other path is ``404 not-found``, and no query string
is forwarded (the page sends none).

Live streams (the page's event stream, an instance's log stream) go over a client of their
own, at most `MAX_STREAMS` at once (one more is refused 503 at once, saying so), so open
tabs never take the connections the page's commands need; a command the supervisor does
not answer is a 502 naming the socket, and one this door cannot send (its own connections
all busy) a 503 saying that.

The door is served like the control API (``asgi_worker.serve_asgi``): a client that stops
reading cannot hold a write for ever, and Ctrl-C cuts every connection at once.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import trio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi_worker import serve_asgi
from .client_gone import cancelled_when_gone
from .control_access import BearerOnTcp, BrowserGuard, error_body
from .control_server import _config, _tcp_socket, _wrapped
from .ui_app import open_to_all
from .ui_paths import forwarded_path

PREFIX = "/ui"
"""The paths the door forwards: the page and its API."""
CONNECT_S = 10.0
"""How long the supervisor has to answer a forwarded request (its headers), float seconds;
a body (a stream) may then take as long as it runs."""
MAX_STREAMS = 64
"""Live streams forwarded at once (each tab holds one; two with an instance's log open)."""
_PASSED = frozenset({b"content-type", b"content-length"})
"""The request headers forwarded to the supervisor."""
_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})
"""The answer headers not passed back (the door's own server sets its framing)."""


class _Forward:
    """The ASGI app that forwards ``/ui`` requests to the supervisor: commands and the
    page over ``commands``, live streams over ``streams`` (module docstring)."""

    def __init__(
        self, commands: httpx.AsyncClient, streams: httpx.AsyncClient, socket_path: Path
    ) -> None:
        self.commands = commands
        self.streams = streams
        self.socket_path = socket_path
        self.streaming = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = forwarded_path(scope.get("raw_path") or scope["path"].encode())
        if path is None:
            refusal = error_body("not-found", "only the web page is served here")
            await JSONResponse(refusal, status_code=404)(scope, receive, send)
            return
        if not _streams(path):
            await self.forward(self.commands, path, scope, receive, send)
            return
        if self.streaming >= MAX_STREAMS:
            message = (
                f"inferactors ui relays {self.streaming} live streams already, its bound "
                f"({MAX_STREAMS}: one per open tab, two with a log open): close a tab"
            )
            await JSONResponse(error_body("busy", message), status_code=503)(scope, receive, send)
            return
        self.streaming += 1
        try:
            await self.forward(self.streams, path, scope, receive, send)
        finally:
            self.streaming -= 1

    async def forward(
        self, client: httpx.AsyncClient, path: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Send the request on over ``client`` and relay the answer as it comes."""
        headers = [(k, v) for k, v in scope["headers"] if k.lower() in _PASSED]
        body = await Request(scope, receive).body()
        outgoing = client.build_request(scope["method"], path, headers=headers, content=body)
        try:
            upstream = await client.send(outgoing, stream=True)
        except httpx.PoolTimeout:
            message = (
                f"inferactors ui's own connections to the supervisor at {self.socket_path} "
                f"were all in use for {CONNECT_S:g} s (the supervisor was not asked)"
            )
            await JSONResponse(error_body("busy", message), status_code=503)(scope, receive, send)
            return
        except httpx.HTTPError as error:
            why = str(error) or type(error).__name__
            message = f"the supervisor at {self.socket_path} did not answer: {why}"
            failed = JSONResponse(error_body("backend", message), status_code=502)
            await failed(scope, receive, send)
            return
        try:
            await _relay(upstream, receive, send)
        finally:
            await upstream.aclose()


def _streams(path: str) -> bool:
    """Whether ``path`` (a forwarded one) is a live stream: the page's event stream, or an
    instance's log stream."""
    return path == "/ui/api/stream" or path.endswith("/logs")


async def _lifespan(receive: Receive, send: Send) -> None:
    """ASGI's lifespan: nothing to start or stop, said as done."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _relay(upstream: httpx.Response, receive: Receive, send: Send) -> None:
    """Send ``upstream``'s answer on as it comes; stop when the client leaves."""
    headers = [(k, v) for k, v in upstream.headers.raw if k.lower() not in _HOP]
    await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
    async with cancelled_when_gone(receive) as client:
        try:
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError:
            pass  # the supervisor went away mid-answer: the answer ends here
    if not client.gone:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def ui_door_app(
    commands: httpx.AsyncClient, streams: httpx.AsyncClient, socket_path: Path, token: str
) -> ASGIApp:
    """The door's ASGI app (module docstring) over two clients of the supervisor's socket
    at ``socket_path``: ``commands`` for the page and its commands, ``streams`` for live
    streams."""
    forward = _Forward(commands, streams, socket_path)
    return BrowserGuard(BearerOnTcp(forward, token, open_to_all))


async def serve_ui_door(
    socket_path: Path,
    token: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the door on ``host:port`` (0: a free port) until cancelled; started with the
    page's address (``http://127.0.0.1:PORT/ui/``, without the token).

    Raises:
        InvalidConfig: ``host`` is not a loopback address, or the port cannot be bound.
    """
    listener = _tcp_socket(host, port)
    named = f"[{host}]" if ":" in host else host
    address = f"http://{named}:{listener.getsockname()[1]}{PREFIX}/"
    timeout = httpx.Timeout(CONNECT_S, read=None)

    def client(limits: httpx.Limits) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(uds=str(socket_path), limits=limits)
        return httpx.AsyncClient(
            transport=transport, timeout=timeout, base_url="http://inferactors"
        )

    streams_limits = httpx.Limits(max_connections=MAX_STREAMS, max_keepalive_connections=0)
    try:
        async with client(httpx.Limits()) as commands, client(streams_limits) as streams:
            app = _wrapped(ui_door_app(commands, streams, socket_path, token))
            serving = partial(serve_asgi, app, _config(), [listener], trio.sleep_forever)
            async with trio.open_nursery() as nursery:
                await nursery.start(serving)
                task_status.started(address)
    finally:
        listener.close()
