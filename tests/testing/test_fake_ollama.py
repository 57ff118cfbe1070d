"""The fake Ollama's pure bookkeeping (Go durations, keep_alive) and its behaviour through
`FakeOllama.transport` under MockClock (expiry, keep_alive rules, faults); issue 4 item 5;
server-apis.md section 3; FC-18, FC-19, FC-21. Its wire format over real sockets is
``test_fake_ollama_wire.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import trio
import trio.testing

from inferactors.testing._fake_ollama import FakeOllama, FakeRequest
from inferactors.testing._fake_ollama_api import FakeOllamaConfig
from inferactors.testing._fake_ollama_state import (
    GO_FOREVER_S,
    BadDuration,
    full_name,
    keep_alive_seconds,
    parse_go_duration,
)
from testing.fake_ollama_support import RUNNER_TIMEOUT, generate

ANCHOR = datetime(2030, 1, 1, tzinfo=UTC)

# --- pure bookkeeping ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("10s", 10.0),
        ("250ms", 0.25),
        ("+5m", 300.0),
        ("-1m", -60.0),
    ],
)
def test_go_durations_parse_as_go_does(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3600", 'time: missing unit in duration "3600"'),
        ("-1", 'time: missing unit in duration "-1"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("", 'time: invalid duration ""'),
        ("m", 'time: invalid duration "m"'),
        ("--5m", 'time: invalid duration "--5m"'),
    ],
)
def test_bad_go_durations_are_refused_with_gos_message(text: str, message: str) -> None:
    with pytest.raises(BadDuration) as caught:
        parse_go_duration(text)
    assert str(caught.value) == message


def test_keep_alive_values_read_as_ollama_reads_them() -> None:
    assert keep_alive_seconds(None) is None  # absent: leave the runner's duration unchanged
    assert keep_alive_seconds(600) == 600.0
    assert keep_alive_seconds(90.7) == 90.0  # whole seconds
    assert keep_alive_seconds(-1) == GO_FOREVER_S
    assert keep_alive_seconds("-1m") == GO_FOREVER_S
    assert keep_alive_seconds(0) == 0.0
    assert keep_alive_seconds("0") == 0.0
    with pytest.raises(BadDuration):
        keep_alive_seconds(True)
    with pytest.raises(BadDuration):
        keep_alive_seconds([1])


def test_a_name_without_a_tag_is_latest() -> None:
    assert full_name("tiny") == "tiny:latest"
    assert full_name("qwen2.5:0.5b") == "qwen2.5:0.5b"
    assert full_name("localhost:5000/team/tiny") == "localhost:5000/team/tiny:latest"


# --- behaviour under MockClock, no sockets ---------------------------------------------------


@pytest.fixture
async def fake(autojump_clock: trio.testing.MockClock) -> FakeOllama:
    """A fake with ``tiny`` pulled; tests set faults by replacing ``fake.config``.

    Tests using it name ``autojump_clock`` too: pytest-trio takes the clock only from a
    test's own arguments.
    """
    return FakeOllama.create(FakeOllamaConfig(models=("tiny",)), wall_anchor=ANCHOR)


@pytest.fixture
async def http(fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url="http://ollama.test", transport=fake.transport()) as c:
        yield c


async def expiry_of(http: httpx.AsyncClient, name: str) -> datetime | None:
    for entry in (await http.get("/api/ps")).json()["models"]:
        if entry["name"] == name:
            return datetime.fromisoformat(entry["expires_at"])
    return None


def after(fake: FakeOllama, start: float, seconds: float) -> datetime:
    """The calendar time the fake shows for ``seconds`` after trio time ``start``."""
    return fake.wall(start + seconds)


async def test_a_fresh_load_gets_five_minutes_and_expires_on_trio_time(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    start = trio.current_time()
    reply = await generate(http, {"model": "tiny", "prompt": "", "stream": False})
    assert fake.wall(start) == ANCHOR + timedelta(seconds=start - fake.trio_anchor)
    assert reply.status_code == 200
    assert reply.json()["done_reason"] == "load"
    assert await expiry_of(http, "tiny:latest") == after(fake, start, 300)
    await trio.sleep_until(start + 299)
    assert fake.resident() == ("tiny:latest",)
    await trio.sleep_until(start + 301)
    assert fake.resident() == ()
    assert (await http.get("/api/ps")).json() == {"models": []}


async def test_a_request_without_keep_alive_leaves_the_duration_unchanged(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    await generate(http, {"model": "tiny", "prompt": "", "stream": False, "keep_alive": "10m"})
    start = trio.current_time()
    await trio.sleep(60)
    reply = await generate(http, {"model": "tiny", "prompt": "hi", "stream": False})
    assert reply.json()["response"] == "Hello from the fake Ollama."
    # the idle timer restarted when the request finished, with the same 10 minutes
    assert await expiry_of(http, "tiny:latest") == after(fake, start, 60 + 600)


async def test_a_negative_keep_alive_is_forever_and_a_new_value_replaces_it(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    start = trio.current_time()
    forever = await expiry_of(http, "tiny:latest")
    assert forever is not None
    assert forever.year > 2300  # Go's largest duration from now
    await trio.sleep(24 * 3600)
    assert fake.resident() == ("tiny:latest",)
    await generate(http, {"model": "tiny", "prompt": "hi", "stream": False, "keep_alive": "5m"})
    assert await expiry_of(http, "tiny:latest") == after(fake, start, 24 * 3600 + 300)


async def test_keep_alive_zero_unloads_at_once(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    reply = await generate(http, {"model": "tiny", "keep_alive": 0})
    assert reply.json()["done_reason"] == "unload"
    assert reply.json()["done"] is True
    assert fake.resident() == ()


async def test_ps_lists_the_longest_remaining_first(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny", "a", "b")))
    async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as http:
        await generate(http, {"model": "a", "prompt": "", "keep_alive": "1m"})
        await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
        await generate(http, {"model": "b", "prompt": "", "keep_alive": "1h"})
        names = [entry["name"] for entry in (await http.get("/api/ps")).json()["models"]]
    assert names == ["tiny:latest", "b:latest", "a:latest"]


async def test_a_slow_load_answers_after_the_load_and_is_listed_while_loading(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    fake.config = FakeOllamaConfig(models=("tiny",), load_delay_s=120.0)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(generate, http, {"model": "tiny", "prompt": "", "keep_alive": -1})
        await trio.sleep(60)
        assert fake.resident() == ("tiny:latest",)  # Ollama lists a runner from load start
        assert fake.book.runners["tiny:latest"].loading
    assert trio.current_time() - start == pytest.approx(120.0)
    assert not fake.book.runners["tiny:latest"].loading


async def test_a_load_error_is_returned_and_nothing_stays_loaded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    fake.config = FakeOllamaConfig(models=("tiny",), load_delay_s=300.0, load_error=RUNNER_TIMEOUT)
    start = trio.current_time()
    reply = await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    assert reply.status_code == 500
    assert reply.json() == {"error": RUNNER_TIMEOUT}
    assert trio.current_time() - start == pytest.approx(300.0)
    assert fake.resident() == ()


async def test_a_load_abandoned_by_its_client_leaves_nothing_loaded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    """FC-18: the client gives up (here: is cancelled) before the load finishes."""
    fake.config = FakeOllamaConfig(models=("tiny",), load_delay_s=100.0)
    with trio.move_on_after(10):
        await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    assert fake.resident() == ()
    start = trio.current_time()
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    assert trio.current_time() - start == pytest.approx(100.0)  # a whole new load


async def test_an_unloaded_model_lingers_then_goes(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    """FC-21: the unload answers at once; the runner stays in /api/ps for a while."""
    fake.config = FakeOllamaConfig(models=("tiny",), unload_linger_s=3.0)
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    start = trio.current_time()
    reply = await generate(http, {"model": "tiny", "keep_alive": 0})
    assert reply.json()["done_reason"] == "unload"
    assert trio.current_time() == start
    assert await expiry_of(http, "tiny:latest") == after(fake, start, 0)
    await trio.sleep(2.9)
    assert fake.resident() == ("tiny:latest",)
    await trio.sleep(0.2)
    assert fake.resident() == ()


async def test_a_load_during_lingering_waits_for_the_old_runner_to_go(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    fake.config = FakeOllamaConfig(models=("tiny",), unload_linger_s=3.0)
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": -1})
    await generate(http, {"model": "tiny", "keep_alive": 0})
    start = trio.current_time()
    await generate(http, {"model": "tiny", "prompt": "", "keep_alive": "1m"})
    assert trio.current_time() - start == pytest.approx(3.0)
    assert await expiry_of(http, "tiny:latest") == after(fake, start, 3.0 + 60)


async def test_a_preloaded_model_is_resident_from_the_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = FakeOllamaConfig(models=("tiny",), preloaded=("other:7b",))
    fake = FakeOllama.create(config, wall_anchor=ANCHOR)
    assert fake.resident() == ("other:7b",)
    await trio.sleep(7 * 24 * 3600)
    assert fake.resident() == ("other:7b",)  # forever by default
    assert "other:7b" in fake.book.pulled


async def test_completions_honour_the_token_limit(
    autojump_clock: trio.testing.MockClock, http: httpx.AsyncClient
) -> None:
    body = {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 1}}
    reply = (await generate(http, body)).json()
    assert (reply["response"], reply["done_reason"], reply["eval_count"]) == ("Hello", "length", 1)
    chat = await http.post(
        "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    choice = chat.json()["choices"][0]
    assert choice == {
        "index": 0,
        "message": {"role": "assistant", "content": "Hello from"},
        "finish_reason": "length",
    }


async def test_a_streamed_generate_is_ndjson(
    autojump_clock: trio.testing.MockClock, http: httpx.AsyncClient
) -> None:
    reply = await generate(http, {"model": "tiny", "prompt": "hi", "options": {"num_predict": 2}})
    assert reply.headers["content-type"] == "application/x-ndjson"
    chunks = [json.loads(line) for line in reply.text.splitlines()]
    assert [c["response"] for c in chunks] == ["Hello", " from", ""]
    assert [c["done"] for c in chunks] == [False, False, True]


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"model": "nope", "prompt": ""}, 404, "model 'nope' not found"),
        ({"prompt": ""}, 400, "model is required"),
        ({"model": "tiny", "keep_alive": "3600"}, 400, 'time: missing unit in duration "3600"'),
    ],
)
async def test_bad_generate_requests_are_refused(
    autojump_clock: trio.testing.MockClock,
    fake: FakeOllama,
    http: httpx.AsyncClient,
    body: dict[str, object],
    status: int,
    error: str,
) -> None:
    reply = await generate(http, body)
    assert (reply.status_code, reply.json()) == (status, {"error": error})
    assert fake.resident() == ()


async def test_other_paths_are_404_and_every_request_is_recorded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama, http: httpx.AsyncClient
) -> None:
    assert (await http.delete("/api/delete")).status_code == 404
    assert (await http.post("/api/pull", json={"model": "x"})).status_code == 404
    assert (await http.get("/")).text == "Ollama is running"
    await generate(http, {"model": "tiny", "keep_alive": 0})
    assert fake.requests == [
        FakeRequest("DELETE", "/api/delete", None),
        FakeRequest("POST", "/api/pull", {"model": "x"}),
        FakeRequest("GET", "/", None),
        FakeRequest("POST", "/api/generate", {"model": "tiny", "keep_alive": 0}),
    ]
