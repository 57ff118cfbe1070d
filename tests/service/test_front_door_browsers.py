"""A web page cannot drive the loopback front door: a foreign ``Origin`` (a form's POST,
a fetch), ``Sec-Fetch-Site: cross-site`` (an ``<img>``'s GET of ``/upstream/...``) and a
``Host`` that is not loopback (DNS rebinding) are refused with 403 in the route's dialect
before any model is asked for. Real clients (no ``Origin``, a loopback ``Host``) go on.
Sent as raw HTTP, so every header is exactly what a browser would send."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from inferactors._config.front_door import FrontDoorConfig
from inferactors._errors import InvalidConfig
from service.front_door_support import door, entry_for, fake

BODY = b'{"model": "m", "prompt": "x", "stream": false}'


async def _raw(port: int, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as it is; the status and the body of the answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        answer = b""
        with trio.fail_after(20):
            while not _complete(answer) and (chunk := await stream.receive_some(65536)):
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole response with a Content-Length (the status is all
    these tests read of a chunked one)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


def _post(path: str, host: str, extra: str = "", ctype: str = "application/json") -> bytes:
    lines = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n{extra}\r\n"
    )
    return lines.encode() + BODY


def _get(path: str, host: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n".encode()


@pytest.mark.parametrize(
    ("path", "build", "words"),
    [
        (  # a form on another site posts to the OpenAI route
            "/v1/completions",
            lambda own: _post(
                "/v1/completions",
                own,
                "Origin: http://evil.example\r\n",
                "application/x-www-form-urlencoded",
            ),
            "Origin 'http://evil.example' is not this service's own",
        ),
        (  # a text/plain fetch through the passthrough
            "/upstream/m/completion",
            lambda own: _post(
                "/upstream/m/completion", own, "Origin: http://evil.example\r\n", "text/plain"
            ),
            "Origin 'http://evil.example'",
        ),
        (  # an <img src> of another site: no Origin, but Sec-Fetch-Site
            "/upstream/m/props",
            lambda own: _get("/upstream/m/props", own, "Sec-Fetch-Site: cross-site\r\n"),
            "Sec-Fetch-Site 'cross-site'",
        ),
        (  # DNS rebinding: the page's own name now points at 127.0.0.1
            "/api/generate",
            lambda own: _post(
                "/api/generate",
                "attacker.example:" + own.rsplit(":", 1)[1],
                "Origin: http://attacker.example:" + own.rsplit(":", 1)[1] + "\r\n",
            ),
            "Host 'attacker.example:",
        ),
        (  # rebinding read of the model list, without an Origin (a same-origin GET)
            "/v1/models",
            lambda own: _get("/v1/models", "attacker.example:" + own.rsplit(":", 1)[1]),
            "not this loopback service's own address",
        ),
        (  # a name under .localhost is not localhost (the control API's rule)
            "/v1/models",
            lambda own: _get("/v1/models", "app.localhost:" + own.rsplit(":", 1)[1]),
            "Host 'app.localhost:",
        ),
        (  # the own origin, exactly (the control API's rule)
            "/v1/models",
            lambda own: _get("/v1/models", own, f"Origin: HTTP://{own}\r\n"),
            "Origin 'HTTP://127.0.0.1:",
        ),
    ],
)
async def test_a_web_pages_request_is_refused_before_any_model_is_asked(
    tmp_path: Path, path: str, build: object, words: str
) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d:
            own = f"127.0.0.1:{d.door.port}"
            status, body = await _raw(d.door.port, build(own))  # type: ignore[operator]
    assert status == 403
    document = json.loads(body)
    message = document["error"] if path.startswith("/api/") else document["error"]["message"]
    assert words in message
    assert not d.scheduler.granted  # nothing started, nothing forwarded


@pytest.mark.parametrize(
    "host_of",
    [
        lambda port: f"127.0.0.1:{port}",
        lambda port: f"localhost:{port}",
        lambda port: "localhost",
    ],
)
async def test_real_clients_without_origin_go_on(tmp_path: Path, host_of: object) -> None:
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d:
            host = host_of(d.door.port)  # type: ignore[operator]
            form = _post("/api/generate", host, ctype="application/x-www-form-urlencoded")
            status, _ = await _raw(d.door.port, form)  # curl -d
            own = f"http://{host}"
            same, _ = await _raw(
                d.door.port,
                _post("/v1/completions", host, f"Origin: {own}\r\nSec-Fetch-Site: same-origin\r\n"),
            )
    assert status == 200
    assert same == 200


async def test_beyond_loopback_the_host_is_not_checked_but_origins_are(tmp_path: Path) -> None:
    key = tmp_path / "door.key"
    key.write_text("s3cret-key-for-the-door")
    key.chmod(0o600)
    config = FrontDoorConfig(host="0.0.0.0", port=0, allow_beyond_loopback=True, api_key_file=key)
    auth = "Authorization: Bearer s3cret-key-for-the-door\r\n"
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=config) as d:
            named, _ = await _raw(d.door.port, _post("/v1/completions", "gpu-box:1", auth))
            foreign, _ = await _raw(
                d.door.port,
                _post("/v1/completions", "gpu-box:1", auth + "Origin: http://evil.example\r\n"),
            )
    assert named == 200
    assert foreign == 403


async def test_a_bad_key_file_is_named_as_the_front_doors_api_key_file(tmp_path: Path) -> None:
    key = tmp_path / "empty.key"
    key.write_text("")
    key.chmod(0o600)
    config = FrontDoorConfig(host="0.0.0.0", port=0, allow_beyond_loopback=True, api_key_file=key)
    said: list[str] = []
    with fake(tmp_path) as server:
        try:
            async with door(entry_for("m", server), config=config):
                pass
        except* InvalidConfig as group:
            said += [str(error) for error in group.exceptions]
    assert said
    assert f"front door API key file {key}" in said[0]
    assert "control token" not in said[0]
