"""The front door's upstream client sends a request once, against a real socket server
(tests/edges/closing_server.py), whatever httpcore says: only a request sent on a REUSED
kept connection that ended before the answer's head is sent again, once, on a new
connection. A connection opened for the request is never tried twice: a server that read
the POST and closed must not get it again."""

from __future__ import annotations

import httpx
import pytest

from edges.closing_server import ClosingServer, open_closing_server
from inferactors._edges.upstream import UpstreamClients

BODY = b'{"model":"m","prompt":"once"}'


async def _post(clients: UpstreamClients, server: ClosingServer, body: bytes = BODY) -> bytes:
    answer = await clients.open(server.base_url, "POST", "/completion", body=body)
    try:
        return await answer.aread()
    finally:
        await answer.aclose()


@pytest.mark.parametrize("play", ["read-then-close", "close-unread", "fin-unread"])
async def test_a_new_connection_that_ends_unanswered_is_never_tried_again(play: str) -> None:
    clients = UpstreamClients()
    async with open_closing_server([play]) as server:
        try:
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                await _post(clients, server)
        finally:
            await clients.aclose()
    assert server.connections == 1
    assert server.read == ([(1, "POST", BODY)] if play == "read-then-close" else [])


async def test_a_kept_connection_the_server_closed_while_idle_is_not_used() -> None:
    clients = UpstreamClients()
    async with open_closing_server(["answer-then-close"]) as server:
        try:
            assert await _post(clients, server, b"first") == b"ok:first"
            await server.idle_closed.wait()
            assert await _post(clients, server) == b"ok:" + BODY
        finally:
            await clients.aclose()
    assert server.read == [(1, "POST", b"first"), (2, "POST", BODY)]


@pytest.mark.parametrize("play", ["close-unread", "fin-unread"])
async def test_a_kept_connection_closed_as_the_request_arrived_is_sent_once_more(
    play: str,
) -> None:
    clients = UpstreamClients()
    async with open_closing_server(["answer", play]) as server:
        try:
            assert await _post(clients, server, b"first") == b"ok:first"
            assert await _post(clients, server) == b"ok:" + BODY
            assert await _post(clients, server, b"third") == b"ok:third"  # on a new kept one
        finally:
            await clients.aclose()
    assert server.read == [(1, "POST", b"first"), (2, "POST", BODY), (3, "POST", b"third")]


async def test_the_second_try_is_the_last() -> None:
    clients = UpstreamClients()
    async with open_closing_server(["answer", "close-unread", "read-then-close"]) as server:
        try:
            assert await _post(clients, server, b"first") == b"ok:first"
            with pytest.raises(httpx.RemoteProtocolError):
                await _post(clients, server)
        finally:
            await clients.aclose()
    assert server.connections == 2
    assert server.read == [(1, "POST", b"first"), (2, "POST", BODY)]


async def test_a_malformed_answer_on_a_kept_connection_is_not_tried_again() -> None:
    clients = UpstreamClients()
    async with open_closing_server(["answer", "garbage"]) as server:
        try:
            assert await _post(clients, server, b"first") == b"ok:first"
            with pytest.raises(httpx.RemoteProtocolError):
                await _post(clients, server)
        finally:
            await clients.aclose()
    assert server.connections == 1
    assert server.read == [(1, "POST", b"first"), (1, "POST", BODY)]
