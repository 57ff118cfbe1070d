"""Bodies a client sends do not disturb the supervisor's event loop, nor other clients (real
front door over HTTP, real clients): a large JSON body is parsed off the loop, so the loop
keeps running while it is read; the bytes of the bodies read at once are bounded, and so is
the number of large bodies, one over a bound answered 503 in the route's dialect, naming
the bound; bodies that trickle in a byte a second hold only their bytes, so other clients
are served meanwhile; a body that stops coming gets 408.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import trio

from inferactors._config.front_door import FrontDoorConfig
from inferactors._errors import InvalidConfig
from inferactors._safe_json import parse_json
from service.front_door_support import door, ended, entry_for, fake

TICK_S = 0.01


def _big_body(objects: int) -> bytes:
    """A JSON object for an unknown model with ``objects`` small objects in it: cheap to
    send, costly to parse (as a client's hostile body is)."""
    items = [{"a": [1, 2.5, "s", None]} for _ in range(objects)]
    return json.dumps({"model": "nosuch", "prompt": "a", "x": items}).encode()


async def _longest_gap(until: trio.Event) -> float:
    """The longest the loop went without running this task, float seconds, until set."""
    longest, before = 0.0, time.monotonic()
    while not until.is_set():
        await trio.sleep(TICK_S)
        now = time.monotonic()
        longest, before = max(longest, now - before - TICK_S), now
    return longest


async def test_a_large_body_is_parsed_off_the_event_loop(tmp_path: Path) -> None:
    body = _big_body(250_000)
    started = time.monotonic()
    parse_json(body)
    cost_s = time.monotonic() - started  # what parsing it on the loop would stall it
    assert cost_s > 0.3, cost_s  # the body is big enough for the check to mean something
    gaps: list[float] = []
    with fake(tmp_path) as server:
        async with door(entry_for("m", server)) as d, httpx.AsyncClient(timeout=60) as client:
            done = trio.Event()

            async def watch() -> None:
                gaps.append(await _longest_gap(done))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                answer = await client.post(
                    d.url + "/v1/completions",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                done.set()
    assert answer.status_code == 404  # it was read and parsed whole: the model is unknown
    assert "nosuch" in answer.json()["error"]["message"]
    # parsed on the loop, the longest gap would be the whole parse (at least cost_s); in a
    # thread the loop turns while it runs, save for the stretches the C scanner holds the
    # GIL, which a loaded machine lengthens (0.81 s of 1.78 s seen in a parallel run)
    assert gaps[0] < cost_s * 0.6, (gaps, cost_s)


LARGE = 300_000
"""Bytes a large slow upload sends: more than the bodies parsed on the loop (256 KiB)."""


async def _slow_upload(
    port: int, opened: trio.Event, sent: int = 1, every_s: float | None = None
) -> None:
    """A client that sends a request head and ``sent`` bytes of its 1,000,000-byte body,
    then one more byte each ``every_s`` (or nothing)."""
    path = "/v1/completions"
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        )
        await stream.send_all(head.encode() + b"{" + b" " * (sent - 1))
        opened.set()
        if every_s is None:
            await trio.sleep_forever()
        while True:
            await trio.sleep(every_s)
            await stream.send_all(b" ")


def _large(model: str) -> bytes:
    return json.dumps({"model": model, "prompt": "a", "pad": "x" * 400_000}).encode()


async def test_large_bodies_over_the_bound_are_refused_in_the_dialect(tmp_path: Path) -> None:
    config = FrontDoorConfig(port=0, bodies_at_once=3, body_timeout_s=30.0)
    json_type = {"content-type": "application/json"}
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=config) as d:
            async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=5.0) as client:
                for _ in range(3):
                    opened = trio.Event()
                    nursery.start_soon(_slow_upload, d.door.port, opened, LARGE)
                    await opened.wait()
                await _until_reading(d.url, client)
                started = trio.current_time()
                openai = await client.post(
                    d.url + "/v1/completions", content=_large("m"), headers=json_type
                )
                ollama = await client.post(
                    d.url + "/api/generate", content=_large("m"), headers=json_type
                )
                small = await client.post(
                    d.url + "/v1/completions", json={"model": "m", "prompt": "a", "max_tokens": 2}
                )
                took = trio.current_time() - started
                nursery.cancel_scope.cancel()
            after = await _completion(d.url, _large("m"))
    assert took < 5.0  # answered at once, not after the slow bodies' 30 s
    assert openai.status_code == ollama.status_code == 503
    words = "reading 3 large request bodies (over 262144 bytes) already, its bound (3 at once)"
    assert words in openai.json()["error"]["message"]
    assert words in ollama.json()["error"]
    assert small.status_code == 200  # a small body never waits for a large body's slot
    assert after.status_code == 200  # the slots came back when the slow clients left
    ended(d.scheduler)


async def test_slow_bodies_do_not_shut_the_door_to_others(tmp_path: Path) -> None:
    # more slow uploads than the default 64 slots, each sending its body a byte a second
    slow = 100
    config = FrontDoorConfig(port=0, body_timeout_s=60.0)
    with fake(tmp_path / "a") as first, fake(tmp_path / "b") as other:
        models = (entry_for("a", first), entry_for("b", other))
        async with (
            door(*models, config=config) as d,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=30.0) as client,
        ):
            for _ in range(slow):
                opened = trio.Event()
                nursery.start_soon(_slow_upload, d.door.port, opened, 1, 1.0)
                await opened.wait()
            await trio.sleep(1.5)  # every slow body is being read
            started = trio.current_time()
            answers = [
                await client.post(d.url + path, json={"model": "b", "prompt": "a", "max_tokens": 2})
                for path in ("/v1/completions", "/completion", "/api/generate")
            ]
            took = trio.current_time() - started
            nursery.cancel_scope.cancel()
    assert [answer.status_code for answer in answers] == [200, 200, 200], answers[0].text
    assert took < 10.0
    ended(d.scheduler)


async def test_a_body_that_stops_coming_gets_408(tmp_path: Path) -> None:
    config = FrontDoorConfig(port=0, body_timeout_s=30.0, body_idle_timeout_s=0.5)
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=config) as d:
            stream = await trio.open_tcp_stream("127.0.0.1", d.door.port)
            async with stream:
                head = (
                    f"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1:{d.door.port}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                )
                started = trio.current_time()
                await stream.send_all(head.encode())
                answer = b""
                with trio.fail_after(10.0):
                    while b"}" not in answer:
                        data = await stream.receive_some(65536)
                        if not data:
                            break
                        answer += data
                took = trio.current_time() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"the request body stopped coming: nothing for 0.5 s (1 bytes came)" in answer
    assert took < 5.0  # not the whole body's 30 s
    assert not d.scheduler.granted


async def _until_reading(url: str, client: httpx.AsyncClient) -> None:
    """Wait until the slow uploads hold their slots (the next large body is refused)."""
    with trio.fail_after(10.0):
        while True:
            probe = await client.post(
                url + "/v1/completions",
                content=_large("nosuch"),
                headers={"content-type": "application/json"},
            )
            if probe.status_code == 503:
                return
            await trio.sleep(0.05)


async def _completion(url: str, body: bytes) -> httpx.Response:
    with trio.fail_after(10.0):
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                answer = await client.post(
                    url + "/v1/completions",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                if answer.status_code != 503:
                    return answer
                await trio.sleep(0.05)


async def _held_upload(port: int, answers: list[bytes], opened: trio.Event) -> None:
    """A client that sends a request head and 899 bytes of its 900-byte body, then waits
    and keeps what the front door answers (raw: an HTTP client reads no answer before its
    body is sent)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 900\r\n\r\n"
        )
        await stream.send_all(head.encode() + b"{" + b" " * 898)
        opened.set()
        answer = b""
        while b"}}" not in answer:  # the end of the JSON error document
            data = await stream.receive_some(65536)
            if not data:
                break
            answer += data
        answers.append(answer)


async def test_the_bytes_held_at_once_are_bounded(tmp_path: Path) -> None:
    # at most 8 * 1000 bytes held at once: nine bodies of 899 bytes cannot all be held
    config = FrontDoorConfig(port=0, max_body_bytes=1000, bodies_at_once=64, body_timeout_s=30)
    answers: list[bytes] = []
    with fake(tmp_path) as server:
        async with door(entry_for("m", server), config=config) as d, trio.open_nursery() as nursery:
            for _ in range(9):
                opened = trio.Event()
                nursery.start_soon(_held_upload, d.door.port, answers, opened)
                await opened.wait()
                await trio.sleep(0.2)  # its bytes are read before the next one comes
            with trio.fail_after(5.0):
                while not answers:  # noqa: ASYNC110  (the answer comes from the door)
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert len(answers) == 1
    assert answers[0].startswith(b"HTTP/1.1 503")
    assert b"its bound (8000 bytes at once)" in answers[0]


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(InvalidConfig, match=r"\$.front_door.bodies_at_once must be positive"):
        FrontDoorConfig(port=0, bodies_at_once=0).validate()
