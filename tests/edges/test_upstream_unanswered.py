"""The front door's upstream client tries a request once more when the server closed the
connection before one byte of its answer (a kept-alive connection the server closed while
our loop was late), never for any other failure, and never more than once."""

from __future__ import annotations

import httpx
import pytest

from inferactors._edges.upstream import UNANSWERED, UpstreamClients


class _Closing(httpx.AsyncBaseTransport):
    """Closes unanswered ``closes`` times, then answers 200 ``ok``; counts the sends."""

    def __init__(self, closes: int, error: type[httpx.TransportError]) -> None:
        self.closes, self.error, self.sent = closes, error, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent <= self.closes:
            raise self.error(UNANSWERED, request=request)
        return httpx.Response(200, content=b"ok:" + request.content)


async def _post(transport: _Closing) -> httpx.Response:
    clients = UpstreamClients(transport=transport)
    try:
        answer = await clients.open("http://127.0.0.1:9", "POST", "/completion", body=b"x")
        await answer.aread()
        return answer
    finally:
        await clients.aclose()


async def test_a_connection_closed_unanswered_is_tried_once_more_with_the_same_body() -> None:
    transport = _Closing(1, httpx.RemoteProtocolError)
    answer = await _post(transport)
    assert (answer.status_code, answer.content, transport.sent) == (200, b"ok:x", 2)


async def test_a_second_unanswered_close_is_the_callers_error() -> None:
    transport = _Closing(2, httpx.RemoteProtocolError)
    with pytest.raises(httpx.RemoteProtocolError):
        await _post(transport)
    assert transport.sent == 2


async def test_other_failures_are_not_tried_again() -> None:
    transport = _Closing(1, httpx.ConnectError)
    with pytest.raises(httpx.ConnectError):
        await _post(transport)
    assert transport.sent == 1
