"""Paths that only look like the page's: dot segments and encoded separators, sent as raw
HTTP (no client normalises them first) to ``inferactors ui``'s door and to the
supervisor's own TCP listener, without a token. None reaches another route of the API
(before, ``/ui/static/../../v1/instances`` through the door answered the instances, with
no token); the page's own paths still work."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import h11
import pytest
import trio

from inferactors._cli.ui_words import CliWords
from inferactors._service.control_server import control_socket_path, serve_control
from inferactors._service.ui_app import WebPage
from inferactors._service.ui_door import serve_ui_door
from inferactors._service.ui_paths import forwarded_path
from service.ui_support import PageFleet

TOKEN = "a-token-of-some-length-0123456789"
DOOR_TOKEN = "the-doors-own-token-0123456789"

TRAVERSALS = [
    "/ui/static/../../v1/instances",
    "/ui/static/../../v1/instances/chat/logs?lines=3",
    "/ui/static/../../metrics",
    "/ui/static/../../v1/events?since=0",
    "/ui/static/../api/stream",
    "/ui/static/./../../v1/instances",
    "/ui/static/%2e%2e/%2e%2e/v1/instances",
    "/ui/static/%2E%2E/%2E%2E/v1/instances",
    "/ui/static/.%2e/.%2e/v1/instances",
    "/ui/static/..%2f..%2fv1%2finstances",
    "/ui/static/..%2F..%2Fv1/instances",
    "/ui/static/%252e%252e/%252e%252e/v1/instances",
    "/ui/static/..\\..\\v1\\instances",
    "/ui/static/%5c..%5c..%5cv1/instances",
    "/ui/static//../../v1/instances",
    "//ui/static/../../v1/instances",
    "/ui/static/app.js/../../../v1/instances",
    "/ui/api/../../v1/instances",
    "/ui/api/instances/..",
    "/ui/api/instances/%2e%2e/%2e%2e/%2e%2e/v1/instances",
]


async def raw_get(url: str, target: str, token: str | None = None) -> tuple[int, bytes]:
    """GET ``target`` exactly as written (no normalisation) at ``url``; the status and the
    body (of a stream, its first event); 5 s at most."""
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}Connection: close\r\n\r\n"
    reader = h11.Connection(h11.CLIENT)
    reader.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    reader.send(h11.EndOfMessage())
    stream = await trio.open_tcp_stream(host, int(port))
    status, body = 0, b""
    async with stream:
        await stream.send_all(request.encode("latin-1"))
        with trio.fail_after(5.0):
            while True:
                event = reader.next_event()
                if event is h11.NEED_DATA:
                    reader.receive_data(await stream.receive_some())
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                    if body.startswith(b"event:") and b"\n\n" in body:
                        break
                else:
                    break
    return status, body


async def door_and_listener(tmp_path: Path, nursery: trio.Nursery) -> tuple[str, str]:
    """The supervisor's TCP listener and an ``inferactors ui`` door on its socket."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    fleet = PageFleet()
    control = partial(
        serve_control,
        fleet,
        state_dir=tmp_path,
        tcp_port=0,
        token_file=token_file,
        page=WebPage(fleet, CliWords()),
    )
    binds = await nursery.start(control)
    door = await nursery.start(serve_ui_door, control_socket_path(tmp_path), DOOR_TOKEN)
    return binds[1], door


@pytest.mark.parametrize("target", TRAVERSALS)
async def test_no_dotted_or_encoded_path_reaches_the_api_without_a_token(
    tmp_path: Path, nursery: trio.Nursery, target: str
) -> None:
    listener, door = await door_and_listener(tmp_path, nursery)
    for url in (door, listener):
        status, body = await raw_get(url, target)
        assert status in (400, 401, 404), (url, target, status, body[:200])
        assert b'"instances"' not in body, (url, target, body[:200])
        assert b"event:" not in body, (url, target, body[:200])


@pytest.mark.parametrize("target", TRAVERSALS)
async def test_the_door_forwards_no_dotted_path_even_with_its_token(
    tmp_path: Path, nursery: trio.Nursery, target: str
) -> None:
    _, door = await door_and_listener(tmp_path, nursery)
    status, body = await raw_get(door, target, DOOR_TOKEN)
    assert status in (400, 404), (target, status, body[:200])


async def test_the_pages_own_paths_still_pass_both_ways(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    listener, door = await door_and_listener(tmp_path, nursery)
    for url, token in ((door, DOOR_TOKEN), (listener, TOKEN)):
        assert (await raw_get(url, "/ui/static/app.js"))[0] == 200
        assert (await raw_get(url, "/ui/"))[0] == 200
        assert (await raw_get(url, "/ui/api/instances/chat"))[0] == 401
        status, body = await raw_get(url, "/ui/api/instances/chat", token)
        assert status == 200, (url, status, body[:200])
        assert b'"row"' in body
        status, body = await raw_get(url, "/ui/api/stream", token)
        assert status == 200, (url, status, body[:200])
        assert body.startswith(b"event: rows")
    # the door forwards nothing but the page, even with its token
    assert (await raw_get(door, "/v1/instances", DOOR_TOKEN))[0] == 404
    assert (await raw_get(door, "/metrics", DOOR_TOKEN))[0] == 404


@pytest.mark.parametrize(
    ("raw", "sent"),
    [
        (b"/ui", "/ui"),
        (b"/ui/", "/ui/"),
        (b"/ui/static/app.css", "/ui/static/app.css"),
        (b"/ui/api/instances/chat%3A1/logs", "/ui/api/instances/chat%3A1/logs"),
        (b"/ui/api/instances/a:b/stop", "/ui/api/instances/a%3Ab/stop"),
        (b"/ui/static/other.js", None),
        (b"/ui/api/instances/chat/kill", None),
        (b"/ui/api/instances/a%2Fb", None),
        (b"/ui/api/instances/%00", None),
        (b"/v1/instances", None),
        (b"ui/", None),
    ],
)
def test_forwarded_path_is_an_allow_list_rebuilt_from_decoded_segments(
    raw: bytes, sent: str | None
) -> None:
    assert forwarded_path(raw) == sent
