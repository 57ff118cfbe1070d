"""``inferactors ui``'s door under many live streams (a real control server on its socket,
the real door, raw HTTP clients): open tabs never take the connections the page's
commands need. Before, 100 streams took the door's whole pool to the socket, and the page
and every command then failed after 10 s with 502 "the supervisor ... did not answer"
while the supervisor answered all along. Now the streams beyond the door's bound are
refused at once with 503 ``busy`` saying why, and commands are answered meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import h11
import trio

from inferactors._service.ui_door import MAX_STREAMS
from service.test_ui_door_paths import DOOR_TOKEN, door_and_listener, raw_get

STREAMS = MAX_STREAMS + 40


async def _hold_stream(url: str, seen: list[tuple[int, bytes]], stop: trio.Event) -> None:
    """GET the page's event stream through the door and keep it open until ``stop``;
    note its status and its first bytes (the first event, or the refusal)."""
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    request = (
        f"GET /ui/api/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {DOOR_TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    )
    reader = h11.Connection(h11.CLIENT)
    reader.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    reader.send(h11.EndOfMessage())
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request.encode("latin-1"))
        status, body = 0, b""
        with trio.move_on_after(20.0):
            while not body:
                event = reader.next_event()
                if event is h11.NEED_DATA:
                    reader.receive_data(await stream.receive_some())
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body = bytes(event.data)
                else:
                    break
        seen.append((status, body))
        await stop.wait()


async def test_live_streams_do_not_starve_the_pages_commands(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    _, door = await door_and_listener(tmp_path, nursery)
    seen: list[tuple[int, bytes]] = []
    stop = trio.Event()
    async with trio.open_nursery() as streams:
        for _ in range(STREAMS):
            streams.start_soon(_hold_stream, door, seen, stop)
        with trio.fail_after(30.0):
            while len(seen) < STREAMS:  # noqa: ASYNC110  (the door answers each)
                await trio.sleep(0.05)
        started = trio.current_time()
        view = await raw_get(door, "/ui/api/instances/chat", DOOR_TOKEN)
        page = await raw_get(door, "/ui/", DOOR_TOKEN)
        took = trio.current_time() - started
        stop.set()
    assert view[0] == 200, view
    assert b'"row"' in view[1]
    assert page[0] == 200
    assert took < 3.0  # not the 10 s of a pool timeout
    served = [body for status, body in seen if status == 200]
    refused = [body for status, body in seen if status == 503]
    assert len(served) == MAX_STREAMS
    assert all(body.startswith(b"event: rows") for body in served)
    assert len(refused) == STREAMS - MAX_STREAMS
    error = json.loads(refused[0])["error"]
    assert error["code"] == "busy"
    assert f"live streams already, its bound ({MAX_STREAMS}" in error["message"]
