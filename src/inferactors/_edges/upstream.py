"""The front door's requests to the servers: one kept-alive httpx client per instance.

`UpstreamClients` keeps one `httpx.AsyncClient` per server base URL, so a server's
connections are reused from request to request (httpx runs on trio through anyio). A
request is opened with `UpstreamClients.open` and its answer read as it arrives
(``stream=True``): nothing is buffered here. Clients ignore the environment's proxy
settings (a loopback server is never reached through a proxy), ask for no compression (the
bytes are passed on as they come) and load no CA bundle (the servers speak plain HTTP on
loopback; loading one costs about 0.15 s on the first request to each server).

**Kept connections.** Of the servers we run, only llama-server keeps a connection open
between requests, and closes it after 5 s idle (cpp-httplib's keep-alive timeout);
mlx_lm.server speaks HTTP/1.0 and closes after every answer; Ollama keeps idle connections
open. An idle connection is kept `KEEPALIVE_EXPIRY_S`, counted from the moment we finished
reading the last answer, which comes after the server's own count began: the gap is our
lateness (a client reading slowly, a stalled loop), and the margin to 5 s is what it may
reach. A connection the server has already closed is never reused (httpcore drops a kept
socket that is readable while idle). What is left is a close that crosses our request on
the way: the server closes as the request arrives.

**A request is sent once**, with one exception: a request sent on a REUSED kept connection
that ended (closed or reset) before the answer's head is sent once more, on a new
connection (`open`). The server closed that connection while idle, so it never read the
request. httpcore's trace (the ``trace`` request extension) says whether this request
opened its connection or reused one and where it failed (`_Attempt`); no error text is
read. A request whose connection was opened for it is never sent again: a server that
read it and then closed (a crash mid-prompt, a restart) would get it twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import h11
import httpcore
import httpx

KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle connection to a server is kept for reuse, float seconds: llama-server
closes one after 5 s idle, so our lateness may reach 3 s before the server's close can
cross a request (module docstring)."""

MAX_CONNECTIONS = 256
"""The most connections open to one server at once (a request beyond waits for one)."""


class UpstreamClients:
    """One kept-alive client per server (module docstring).

    Args:
        connect_timeout_s: how long connecting to a server may take, float seconds.
        read_timeout_s: how long the server may stay silent (before its first byte, or
            between two chunks of a stream), float seconds; None waits forever.
    """

    def __init__(
        self, *, connect_timeout_s: float = 5.0, read_timeout_s: float | None = 600.0
    ) -> None:
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
        )
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._fresh: httpx.AsyncClient | None = None

    def client(self, base_url: str) -> httpx.AsyncClient:
        """The client of the server at ``base_url``, made on first use."""
        client = self._clients.get(base_url)
        if client is None:
            client = self._new_client(base_url, kept=MAX_CONNECTIONS)
            self._clients[base_url] = client
        return client

    def _new_client(self, base_url: str, *, kept: int) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=kept,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        return httpx.AsyncClient(
            base_url=base_url,
            timeout=self._timeout,
            limits=limits,
            trust_env=False,
            headers={"Accept-Encoding": "identity"},
            verify=False,  # plain HTTP on loopback: no TLS, so no CA bundle to load
        )

    async def open(
        self,
        base_url: str,
        method: str,
        target: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request and return its answer once the head has arrived; the body is
        read by the caller (``aiter_raw``), who must close the answer (``aclose``):
        closing it before its end closes the connection, which tells the server the
        client is gone.

        Args:
            base_url: the server, ``http://127.0.0.1:PORT``.
            method: the HTTP method.
            target: the path and query (``/v1/chat/completions``).
            body: the request body.
            headers: request headers (``Content-Type``, ``Authorization``, ...).

        A request sent on a reused kept connection that ended before the answer's head
        is sent once more, on a new connection (module docstring); nothing else is.

        Raises:
            httpx.TransportError: the server cannot be reached, or did not answer within
                the read timeout, or ended the connection without an answer (a new
                connection's, or the second one's).
        """
        attempt = _Attempt()
        client = self.client(base_url)
        request = client.build_request(
            method, target, content=body, headers=headers, extensions={"trace": attempt.trace}
        )
        try:
            return await client.send(request, stream=True)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            if not attempt.stale_connection():
                raise
        fresh = self._fresh_client()
        again = fresh.build_request(method, base_url + target, content=body, headers=headers)
        return await fresh.send(again, stream=True)

    def _fresh_client(self) -> httpx.AsyncClient:
        """The client of the requests sent again: a new connection each, never kept."""
        if self._fresh is None:
            self._fresh = self._new_client("", kept=0)
        return self._fresh

    async def aclose(self) -> None:
        """Close every client and its connections."""
        clients, self._clients = list(self._clients.values()), {}
        fresh, self._fresh = self._fresh, None
        for client in [*clients, *([fresh] if fresh is not None else [])]:
            await client.aclose()


@attrs.define
class _Attempt:
    """What httpcore's trace says of one request's connection (the ``trace`` extension:
    events ``connection.connect_tcp.*`` when the request opens its connection,
    ``http11.send_request_headers.started`` once it is written to one,
    ``http11.receive_response_headers.failed`` when no head came)."""

    opened: bool = False
    sent: bool = False
    ended_headless: bool = False
    """The connection ended (closed, or reset) before the answer's head: httpcore's own
    end-of-stream error, or a read that failed; not a head that h11 refused (the server
    did answer). Read when the event comes: the pool clears the error's cause later."""

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event.startswith("connection.connect_"):
            self.opened = True
        elif event == "http11.send_request_headers.started":
            self.sent = True
        elif event == "http11.receive_response_headers.failed":
            error = info.get("exception")
            self.ended_headless = isinstance(error, httpcore.ReadError) or (
                isinstance(error, httpcore.RemoteProtocolError)
                and not isinstance(error.__cause__, h11.RemoteProtocolError)
            )

    def stale_connection(self) -> bool:
        """Whether the request went on a reused connection that then ended before any
        answer's head (module docstring)."""
        return self.sent and not self.opened and self.ended_headless
