"""Shared arrange code for the tests of the HTTP probe: `Fake`, a server on
``httpx.MockTransport`` with fixed routes (404 elsewhere, as mlx_lm.server answers) that
records every path requested; routes that reply, fail or hang; and a closed loopback port.

Imported as ``edges.probe_support``; the sample server replies these tests serve are in
``policy.probe_replies_support``, shared with the pure parsing tests.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import attrs
import httpx
import trio

from inferactors._edges.probe import ProbeClient

Route = Callable[[httpx.Request], Awaitable[httpx.Response]]


def reply(status: int, body: object = None, headers: dict[str, str] | None = None) -> Route:
    """A route answering ``status`` with ``body`` (bytes as is, anything else as JSON)."""

    async def route(request: httpx.Request) -> httpx.Response:
        if body is None or isinstance(body, bytes):
            return httpx.Response(status, content=body or b"", headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return route


def fail(exc: Exception) -> Route:
    """A route whose transport raises ``exc``."""

    async def route(request: httpx.Request) -> httpx.Response:
        raise exc

    return route


async def hang(request: httpx.Request) -> httpx.Response:
    """A route that never answers."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@attrs.define
class Fake:
    """A server on MockTransport: fixed routes by path, 404 elsewhere, every request kept."""

    routes: dict[str, Route]
    requests: list[httpx.Request] = attrs.Factory(list)

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get(request.url.path)
        return httpx.Response(404) if route is None else await route(request)

    def client(self, timeout_s: float = 2.0) -> ProbeClient:
        transport = httpx.MockTransport(self.handle)
        return ProbeClient.open("http://127.0.0.1:8090", timeout_s=timeout_s, transport=transport)


def closed_port() -> int:
    """A loopback port with nothing listening (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
