"""The web page's routes over a fake fleet, served by hypercorn on a real Unix socket: the
page and its assets, the live stream (rows, dated events, samples), an instance's panel,
its log following, and commands answered in the CLI's own words. Reads change nothing."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from inferactors._cli.ui_words import CliWords
from inferactors._edges.tree_usage import TreeUsage
from inferactors._errors import InvalidConfig
from inferactors._service.control_app import control_app
from inferactors._service.control_server import control_socket_path, serve_control
from inferactors._service.ui_app import ASSETS, PAGE_HEADERS, WebPage
from inferactors._service.ui_words import JsonWords, PageWords
from inferactors._service.views import ReloadResult
from service.control_support import crash, running
from service.ui_support import WALL_0, PageFleet, sse


def http(fleet: PageFleet, words: PageWords = JsonWords()) -> httpx.AsyncClient:  # noqa: B008
    app = control_app(fleet, page=WebPage(fleet, words))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://control")


async def served(fleet: PageFleet, nursery: trio.Nursery, where: Path) -> Path:
    page = WebPage(fleet, CliWords())
    await nursery.start(partial(serve_control, fleet, state_dir=where, page=page))
    return control_socket_path(where)


async def wait_for_follows(fleet: PageFleet, count: int) -> None:
    """Poll every 10 ms until ``count`` follow subscriptions are open; fail after 5 s."""
    for _ in range(500):
        if fleet.open_follows == count:
            return
        await trio.sleep(0.01)
    raise AssertionError(f"{fleet.open_follows} follows open, not {count}")


async def test_the_page_and_its_assets_come_from_the_package_with_a_strict_policy() -> None:
    async with http(PageFleet()) as client:
        page = await client.get("/ui/")
        moved = await client.get("/ui", follow_redirects=False)
        assets = {name: await client.get(f"/ui/static/{name}") for name in ASSETS}
        missing = await client.get("/ui/static/nope.js")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert policy == PAGE_HEADERS["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert (moved.status_code, moved.headers["location"]) == (308, "/ui/")
    referenced = set(re.findall(r'(?:src|href)="/ui/static/([^"]+)"', page.text))
    assert referenced == set(ASSETS)
    for name, reply in assets.items():
        assert reply.status_code == 200
        assert reply.headers["content-type"] == ASSETS[name]
        assert reply.headers["x-content-type-options"] == "nosniff"
    assert "http://" not in assets["app.js"].text.replace("http://www.w3.org/2000/svg", "")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not-found")


async def test_an_instance_panel_has_its_dated_timeline_series_and_last_failure() -> None:
    fleet = PageFleet()
    fleet.add_event(crash("chat", at=0.0))
    fleet.history.on_probe("chat", 0.004)
    async with http(fleet, CliWords()) as client:
        detail = (await client.get("/ui/api/instances/chat")).json()
        unknown = await client.get("/ui/api/instances/nope")
    assert detail["row"]["name"] == "chat"
    assert detail["row"]["state"] == "running"
    [item] = detail["timeline"]
    assert item["at"] == pytest.approx(WALL_0)
    assert item["type"] == "ProcessExited"
    assert item["failed"] is True
    # named by its role, as `inferactors run` prints it; the id stays in the data
    assert item["words"].startswith("chat  process 101 exited with status 1 (reason: crash)")
    assert item["data"]["instance_id"] == "id-chat"
    assert detail["last_failure"]["data"]["last_lines"] == ["boom", "bye"]
    assert detail["series"]["probe"][0][1] == 0.004
    assert detail["window_s"] == 3600.0
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown-instance")


@pytest.mark.parametrize(
    ("verb", "status", "words"),
    [
        ("stop", 200, "chat: stopped (reason: requested)"),  # what `inferactors stop` prints
        ("restart", 200, "chat: running"),
        ("start", 409, "inferactors start: chat is already running"),
    ],
)
async def test_a_command_is_answered_in_the_words_the_cli_prints(
    verb: str, status: int, words: str
) -> None:
    fleet = PageFleet()
    async with http(fleet, CliWords()) as client:
        reply = await client.post(f"/ui/api/instances/chat/{verb}")
    assert reply.status_code == status
    body = reply.json()
    assert body["words"] == words
    assert body["ok"] is (status == 200)
    if status == 200:
        assert fleet.calls == [f"{verb} chat"]
        assert body["result"]["name"] == "chat"
    else:
        assert body["error"]["code"] == "invalid-state"


async def test_a_reload_says_what_changed_or_why_nothing_did() -> None:
    fleet = PageFleet()
    async with http(fleet, CliWords()) as client:
        applied = (await client.post("/ui/api/reload")).json()
        fleet.reload_result = ReloadResult(unchanged=("chat",), refused=(("new", "port taken"),))
        refused = (await client.post("/ui/api/reload")).json()
        fleet.reload_error = InvalidConfig("run.toml: instances[0].serve.port: not a port")
        invalid = await client.post("/ui/api/reload")
    assert applied["ok"] is True
    assert applied["words"] == "added: new\nchanged: chat\nunchanged: embed"
    assert refused["ok"] is False
    assert refused["words"].splitlines()[-1] == "refused new: port taken"
    assert invalid.status_code == 400
    assert invalid.json()["words"] == (
        "inferactors reload: the run file is invalid; nothing changed: "
        "run.toml: instances[0].serve.port: not a port"
    )


async def test_reads_never_change_anything(tmp_path: Path, nursery: trio.Nursery) -> None:
    fleet = PageFleet()
    async with http(fleet) as client:
        for path in ("/ui", "/ui/", "/ui/static/app.js", "/ui/api/instances/chat"):
            assert (await client.get(path)).status_code in (200, 308)
        for verb in ("start", "stop", "restart"):  # a GET on a command is not a command
            assert (await client.get(f"/ui/api/instances/chat/{verb}")).status_code == 405
        assert (await client.get("/ui/api/reload")).status_code == 405
    socket_path = await served(fleet, nursery, tmp_path)
    for target in ("/ui/api/stream", "/ui/api/instances/chat/logs"):
        async with sse(socket_path, target) as stream:
            assert (await stream.next_event() or ("",))[0] in ("rows", "lines")
    assert fleet.calls == []


async def test_the_stream_sends_rows_then_each_event_change_and_sample(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = PageFleet()
    socket_path = await served(fleet, nursery, tmp_path)
    async with sse(socket_path, "/ui/api/stream") as stream:
        assert stream.status == 200
        assert stream.headers[b"content-type"].startswith(b"text/event-stream")
        first = await stream.next_named("rows")
        assert [row["name"] for row in first["rows"]] == ["chat", "embed"]
        assert first["door"] is None
        await wait_for_follows(fleet, 1)
        fleet.add_event(crash("chat", at=trio.current_time()))
        event = await stream.next_named("event")
        assert (event["instance"], event["type"], event["failed"]) == (
            "chat",
            "ProcessExited",
            True,
        )
        assert event["at"] == pytest.approx(WALL_0 + trio.current_time(), abs=1.0)
        assert "(reason: crash)" in event["words"]
        chat = fleet.instances["chat"]
        fleet.instances["chat"] = attrs.evolve(chat, status=attrs.evolve(chat.status, restarts=3))
        fleet.changed()
        changes = await stream.next_named("changes")  # only the row that changed
        assert [(row["name"], row["restarts"]) for row in changes["rows"]] == [("chat", 3)]
        assert changes["order"] is None  # the same names, in the same order
        fleet.history.on_usage({"embed": (102, TreeUsage(rss_bytes=5_000_000, cpu_s=1.0))})
        sample = await stream.next_named("sample")
        assert sample["embed"]["memory"][1] == 5_000_000
        changes = await stream.next_named("changes")
        assert [(row["name"], row["rss_bytes"]) for row in changes["rows"]] == [
            ("embed", 5_000_000)
        ]
        del fleet.instances["chat"]
        fleet.changed()
        assert (await stream.next_named("changes"))["order"] == ["embed"]
    await wait_for_follows(fleet, 0)  # the client left: its subscription is closed


async def test_the_stream_ends_cleanly_when_the_fleet_closes(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = PageFleet()
    socket_path = await served(fleet, nursery, tmp_path)
    async with sse(socket_path, "/ui/api/stream") as stream:
        await stream.next_named("rows")
        await wait_for_follows(fleet, 1)
        fleet.end_follows()
        with trio.fail_after(5):
            while await stream.next_event() is not None:
                pass  # the reply ends as a complete body


async def test_the_log_view_gets_the_tail_then_each_new_line(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = PageFleet()
    fleet.add_line("chat", "before")
    socket_path = await served(fleet, nursery, tmp_path)
    async with sse(socket_path, "/ui/api/instances/chat/logs") as stream:
        assert [line["text"] for line in await stream.next_named("lines")] == ["before"]
        await wait_for_follows(fleet, 1)
        fleet.add_line("chat", "after")
        fleet.add_line("chat", "and more")
        seen: list[str] = []
        while len(seen) < 2:
            seen += [line["text"] for line in await stream.next_named("lines")]
        assert seen == ["after", "and more"]
    await wait_for_follows(fleet, 0)


async def test_a_change_at_200_instances_sends_its_row_not_the_table(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The first table is whole; after that, one instance's change is its row alone
    (before, every change re-sent every row: about 100 kB a time at 200 instances)."""
    fleet = PageFleet(instances={f"i{n:03}": running(f"i{n:03}", 1000 + n) for n in range(200)})
    socket_path = await served(fleet, nursery, tmp_path)
    async with sse(socket_path, "/ui/api/stream") as stream:
        first = await stream.next_named("rows")
        table = len(json.dumps(first))
        await wait_for_follows(fleet, 1)
        sizes = []
        for n in range(10):
            name = f"i{n * 7:03}"
            view = fleet.instances[name]
            restarted = attrs.evolve(view.status, restarts=n + 1, uptime_s=0.0)
            fleet.instances[name] = attrs.evolve(view, status=restarted)
            before = fleet.view("i199").status.uptime_s
            await trio.sleep(0.01)  # the uptimes of the others move: not a change
            assert fleet.view("i199").status.uptime_s != before
            fleet.changed()
            changes = await stream.next_named("changes")
            assert [row["name"] for row in changes["rows"]] == [name]
            sizes.append(len(json.dumps(changes)))
    assert len(first["rows"]) == 200
    assert table > 100_000
    assert max(sizes) < 2_000, sizes
