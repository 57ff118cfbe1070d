"""A server that reads a request on a new connection and closes it without an answer gets
it once through the front door, and the client a 502 in its dialect naming the instance and
the cause in httpcore's words (tests/edges/closing_server.py plays the server on a real
socket); a kept connection that ended before the request could be read is not the client's
failure."""

from __future__ import annotations

import httpx

from edges.closing_server import open_closing_server
from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._flavor import InferFlavor
from service.front_door_support import door, ended

BODY = {"model": "m", "prompt": "once"}


def _model(base_url: str) -> tuple[ModelEntry, Upstream]:
    entry = ModelEntry("m", (), InferFlavor.LLAMACPP, Residency.RESIDENT, on_demand=False)
    return entry, Upstream("m", InferFlavor.LLAMACPP, base_url, "")


async def test_a_request_read_then_dropped_is_a_502_and_is_not_sent_again() -> None:
    async with (
        open_closing_server(["read-then-close"]) as server,
        door(_model(server.base_url)) as d,
        httpx.AsyncClient() as client,
    ):
        answer = await client.post(d.url + "/v1/completions", json=BODY)
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert message.startswith(f"model 'm': its server at {server.base_url} did not answer")
    assert "Server disconnected without sending a response" in message
    assert [(method, number) for number, method, _ in server.read] == [("POST", 1)]
    assert server.connections == 1
    ended(d.scheduler)


async def test_a_kept_connection_closed_as_the_request_came_is_not_the_clients_failure() -> None:
    async with (
        open_closing_server(["answer", "close-unread"]) as server,
        door(_model(server.base_url)) as d,
        httpx.AsyncClient() as client,
    ):
        first = await client.post(d.url + "/v1/completions", json=BODY)
        second = await client.post(d.url + "/v1/completions", json=BODY)
    assert (first.status_code, second.status_code) == (200, 200)
    assert [number for number, _, _ in server.read] == [1, 2]
    ended(d.scheduler)
