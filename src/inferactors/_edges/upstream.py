"""The front door's requests to the servers: one kept-alive httpx client per instance.

`UpstreamClients` keeps one `httpx.AsyncClient` per server base URL, so a server's
connections are reused from request to request (httpx runs on trio through anyio). A
request is opened with `UpstreamClients.open` and its answer read as it arrives
(``stream=True``): nothing is buffered here. Clients ignore the environment's proxy
settings (a loopback server is never reached through a proxy), ask for no compression (the
bytes are passed on as they come), load no CA bundle (the servers speak plain HTTP on
loopback; loading one costs about 0.15 s on the first request to each server), and keep
an idle connection `KEEPALIVE_EXPIRY_S`, less than llama-server's own keep-alive (5 s), so
a connection the server is about to close is not reused. A stalled event loop can still
send on a connection the server closed meanwhile: a server that closes the connection
without sending one byte of an answer (`is_closed_unanswered`) never produced one, so the
request is sent once more on a new connection (`open`); a second such close is the
caller's error.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

KEEPALIVE_EXPIRY_S = 4.0
"""How long an idle connection to a server is kept for reuse, float seconds."""

UNANSWERED = "Server disconnected without sending a response"
"""httpcore's words for a connection closed before any byte of the answer."""

MAX_CONNECTIONS = 256
"""The most connections open to one server at once (a request beyond waits for one)."""


class UpstreamClients:
    """One kept-alive client per server (module docstring).

    Args:
        connect_timeout_s: how long connecting to a server may take, float seconds.
        read_timeout_s: how long the server may stay silent (before its first byte, or
            between two chunks of a stream), float seconds; None waits forever.
        transport: the transport every client uses (tests; httpx's own by default).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float | None = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
        )
        self._transport = transport
        self._clients: dict[str, httpx.AsyncClient] = {}

    def client(self, base_url: str) -> httpx.AsyncClient:
        """The client of the server at ``base_url``, made on first use."""
        client = self._clients.get(base_url)
        if client is None:
            limits = httpx.Limits(
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
            )
            client = httpx.AsyncClient(
                base_url=base_url,
                timeout=self._timeout,
                limits=limits,
                trust_env=False,
                transport=self._transport,
                headers={"Accept-Encoding": "identity"},
                verify=False,  # plain HTTP on loopback: no TLS, so no CA bundle to load
            )
            self._clients[base_url] = client
        return client

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

        A connection closed before one byte of the answer (module docstring) is tried
        once more on a new connection.

        Raises:
            httpx.TransportError: the server cannot be reached, or did not answer within
                the read timeout, or closed the connection unanswered twice.
        """
        client = self.client(base_url)
        request = client.build_request(method, target, content=body, headers=headers)
        try:
            return await client.send(request, stream=True)
        except httpx.RemoteProtocolError as error:
            if not is_closed_unanswered(error):
                raise
        again = client.build_request(method, target, content=body, headers=headers)
        return await client.send(again, stream=True)

    async def aclose(self) -> None:
        """Close every client and its connections."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


def is_closed_unanswered(error: httpx.RemoteProtocolError) -> bool:
    """Whether ``error`` is a connection the server closed before one byte of its answer."""
    return UNANSWERED in str(error)
