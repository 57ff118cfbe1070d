"""The web page in a real headless browser (Debian's chromium, driven by Playwright),
against a real ``inferactors run``: the real llama-server on the tiny model (``chat``) and
a fake that crash-loops every few seconds (``flaky``). One browser and one supervisor
serve every test of this module, in order, on one worker.

The page lists every instance as the CLI does; a crash shows within a second, without a
reload; the log view follows, the server's last words at the top; stop and start from the
page change the process as the CLI would, and so does restart, each confirmed and
answered in the CLI's words (reload through ``inferactors ui``); reading changes nothing;
a command without the token, or from another origin, is refused and changes nothing;
``inferactors ui`` serves the page for its user; and the main page's console stays free of
errors. The page's script under a chatty log and a failing stream is tested against a
fake fleet in ``test_web_page_script.py``. The README's section is run here (its
``inferactors run`` flags start the supervisor, its ``inferactors ui`` command serves the
page) and its screenshot (``docs/ui.png``) taken here: with ``INFERACTORS_SCREENSHOT=1``
the test writes it there.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from e2e.web_page_browser import (
    OTHER_SITE,
    SEEN_CHANGE,
    WAIT_MS,
    Watched,
    kept_screenshot,
    open_browser,
    serving_elsewhere,
    wait_until,
    watch,
)
from e2e.web_page_support import PageRun, page_run, readme_commands, readme_token_recipe
from inferactors._cli.control_format import state_words
from inferactors._cli.ui_words import CliWords
from inferactors._service.control_token import read_token
from support import Unprivileged

pytestmark = pytest.mark.xdist_group("web-page")

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "ui.png"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with open_browser() as opened:
        yield opened


@pytest.fixture(scope="module")
def supervised(
    browser: Any,  # first: no supervisor is started when no browser can be had
    unprivileged: Unprivileged,
    llama_server: Path,
    tiny_gguf: Path,
    tiny_mlx_model: Path,
) -> Iterator[PageRun]:
    with page_run(unprivileged, llama_server, tiny_gguf, tiny_mlx_model) as run:
        yield run


@pytest.fixture(scope="module")
def shared(browser: Any, supervised: PageRun) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = watch(context)
    watched.page.goto(supervised.page_url)
    watched.row("flaky").wait_for()
    yield watched
    context.close()


@pytest.fixture
def page(shared: Watched) -> Iterator[Watched]:
    """The shared page; its console must stay free of errors through each test."""
    yield shared
    assert shared.errors == []


def test_the_page_lists_every_instance_as_the_cli_shows_it(
    page: Watched, supervised: PageRun
) -> None:
    views = supervised.views()
    assert page.page.locator("#instances tbody tr").count() == len(views) == 2
    chat = views["chat"]
    wait_until(lambda: page.cell("chat", "pid") == str(chat["status"]["pid"]))
    assert page.cell("chat", "state") == "running"
    assert page.cell("chat", "model") == "tiny"
    assert page.cell("flaky", "model") == "tiny-mlx"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", page.cell("chat", "endpoint"))
    assert page.cell("chat", "ttft").endswith("ms")
    green = page.row("chat").locator(".state").evaluate("e => getComputedStyle(e).backgroundColor")
    assert green == "rgb(30, 142, 62)"  # running is green
    # resident memory comes with the history's next reading (every 5 s), CPU with the one
    # after (the CPU time spent between two readings)
    wait_until(lambda: page.cell("chat", "memory").endswith("MB"), within_s=20)
    assert page.page.locator("#connection").inner_text() == "live"


def test_a_crash_shows_within_a_second_without_a_reload_or_a_request(
    page: Watched, machine_alone: None
) -> None:
    page.page.evaluate("window.notReloaded = true")
    sent: list[str] = []  # every request the page makes from here: none (no polling)

    def record(request: Any) -> None:
        sent.append(request.url)

    page.page.on("request", record)
    for _ in range(5):  # the fake also crashes by itself: kill one that still runs
        pid = wait_until(lambda: _running_pid(page, "flaky"))
        page.page.evaluate(SEEN_CHANGE, ["flaky", pid])
        killed_at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        # (polled from here: the page's policy forbids the eval wait_for_function uses)
        seen_at = wait_until(lambda: page.page.evaluate("window.changeSeenAt"), every_s=0.02)
        seen_s = seen_at / 1000 - killed_at
        break
    else:
        pytest.fail("flaky never stayed up long enough to be killed")
    print(f"a crash showed on the page {seen_s * 1000:.0f} ms after the kill")
    assert seen_s < 1.0
    assert page.page.evaluate("window.notReloaded") is True
    page.page.remove_listener("request", record)
    assert sent == []  # it came over the event stream the page already had open


def _running_pid(page: Watched, name: str) -> int | None:
    pid = page.cell(name, "pid")
    if page.cell(name, "state") != "running" or not pid.isdigit():
        return None
    return int(pid) if psutil.pid_exists(int(pid)) else None


def test_the_log_view_follows_with_the_servers_last_words_at_the_top(page: Watched) -> None:
    page.page.locator('button[data-open="flaky"]').click()
    panel = page.page.locator("#panel")
    assert panel.locator("#panel-name").inner_text() == "flaky"
    last_words = panel.locator("#last-words")
    last_words.wait_for()
    assert (
        last_words.locator("#last-words-title")
        .inner_text()
        .startswith("The server's last words, 20")
    )
    assert "listening on" in last_words.locator("#last-lines").inner_text()
    log = panel.locator("#log")
    wait_until(lambda: "listening on" in log.inner_text())
    opened_with = set(re.findall(r"pid (\d+)", log.inner_text()))
    # the fake restarts every few seconds: a process started after the view opened
    newer = wait_until(lambda: set(re.findall(r"pid (\d+)", log.inner_text())) - opened_with)
    assert all(int(pid) > 0 for pid in newer)
    first = panel.locator("#timeline li").first
    when = first.locator("time").inner_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", when)
    shown = time.mktime(time.strptime(when, "%Y-%m-%d %H:%M:%S"))
    assert abs(shown - time.time()) < 120  # dated by the wall clock
    assert panel.locator("#plot-restarts rect.bar").count() >= 1  # crashes were counted
    assert panel.locator("#plot-probe polyline").count() == 2  # mean and largest
    wait_until(lambda: re.fullmatch(r"\d+%", page.cell("chat", "cpu")), within_s=20)


def _confirm(page: Watched, verb: str, name: str, path: str) -> dict[str, Any]:
    """Click ``verb`` on ``name``'s row, confirm, and return the JSON the page got."""
    page.row(name).locator(f'button[data-verb="{verb}"]').click()
    dialog = page.page.locator("#confirm")
    assert dialog.locator("#confirm-text").inner_text().startswith(f"{verb.title()} {name}?")
    with page.page.expect_response(lambda reply: reply.url.endswith(path)) as answer:
        dialog.locator("#confirm-ok").click()
    body: dict[str, Any] = answer.value.json()
    page.page.locator("#result-words").filter(has_text=body["words"]).wait_for()
    return body


def test_stop_and_start_from_the_page_change_the_process_as_the_cli_would(
    page: Watched, supervised: PageRun
) -> None:
    before = supervised.wait_view("chat", lambda view: view["status"]["state"] == "running")
    old_pid = before["status"]["pid"]
    requests: list[str] = []

    def sent(request: Any) -> None:
        requests.append(request.url)

    page.page.on("request", sent)
    page.row("chat").locator('button[data-verb="stop"]').click()
    page.page.locator("#confirm-cancel").click()  # asked, and not confirmed: nothing is sent
    page.page.remove_listener("request", sent)
    assert not [url for url in requests if "/stop" in url]
    assert psutil.pid_exists(old_pid)

    stopped = _confirm(page, "stop", "chat", "/ui/api/instances/chat/stop")
    shown = page.page.locator("#result-words").inner_text()
    assert shown == CliWords().instance("stop", stopped["result"])
    assert shown == f"chat: {state_words(stopped['result'])}"  # as `inferactors stop` prints
    assert stopped["ok"] is True
    wait_until(lambda: not psutil.pid_exists(old_pid), within_s=15)
    after = supervised.views()["chat"]["status"]
    assert (after["state"], after["stop_reason"], after["pid"]) == ("exited", "requested", None)
    wait_until(lambda: page.cell("chat", "state") == "stopped")

    started = _confirm(page, "start", "chat", "/ui/api/instances/chat/start")
    assert page.page.locator("#result-words").inner_text() == CliWords().instance(
        "start", started["result"]
    )
    running = supervised.wait_view("chat", lambda view: view["status"]["state"] == "running")
    new_pid = running["status"]["pid"]
    assert new_pid != old_pid
    assert "llama-server" in " ".join(psutil.Process(new_pid).cmdline())
    wait_until(lambda: page.cell("chat", "pid") == str(new_pid))


def test_restart_from_the_page_is_a_new_process_said_as_the_cli_would(
    page: Watched, supervised: PageRun
) -> None:
    before = supervised.wait_view("chat", lambda view: view["status"]["state"] == "running")
    old_pid, restarts = before["status"]["pid"], before["status"]["restarts"]
    restarted = _confirm(page, "restart", "chat", "/ui/api/instances/chat/restart")
    assert restarted["ok"] is True
    shown = page.page.locator("#result-words").inner_text()
    assert shown == CliWords().instance("restart", restarted["result"])
    assert shown == f"chat: {state_words(restarted['result'])}"  # as `inferactors restart`
    wait_until(lambda: not psutil.pid_exists(old_pid), within_s=15)
    running = supervised.wait_view(
        "chat", lambda view: view["status"]["state"] == "running" and view["status"]["pid"]
    )
    assert running["status"]["pid"] != old_pid
    assert running["status"]["restarts"] == restarts  # an operator's restart is no crash
    wait_until(lambda: page.cell("chat", "pid") == str(running["status"]["pid"]))


_READS = (
    "/ui/",
    "/ui",
    "/ui/static/app.js",
    "/ui/static/app.css",
    "/ui/api/instances/chat",
    "/ui/api/instances/flaky",
    "/ui/api/instances/chat/start",  # a command's path, read: 405
    "/ui/api/instances/chat/stop",
    "/ui/api/instances/chat/restart",
    "/ui/api/reload",
)
_STREAMS = ("/ui/api/stream", "/ui/api/instances/chat/logs")


def test_reading_changes_nothing(page: Watched, supervised: PageRun) -> None:
    """Every read the page makes, and a read of each command's path, with the token, over
    TCP: each answered, and ``chat`` is still the same process, never restarted."""
    before = supervised.wait_view("chat", lambda view: view["status"]["state"] == "running")
    bearer = {"Authorization": f"Bearer {supervised.token}"}
    with httpx.Client(base_url=supervised.base_url, headers=bearer) as client:
        statuses = {path: client.get(path).status_code for path in _READS}
        for path in _STREAMS:
            with client.stream("GET", path) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                assert next(stream.iter_lines()).startswith("event: ")
        heads = {path: client.head(path).status_code for path in _READS[:4]}
    assert (
        statuses
        == {
            **dict.fromkeys(_READS[:6], 200),
            "/ui": 308,  # to /ui/
            **dict.fromkeys(_READS[6:], 405),
        }
    )
    assert heads == {**dict.fromkeys(_READS[:4], 200), "/ui": 308}
    time.sleep(0.5)  # a command that got through would have begun by now
    after = supervised.views()["chat"]["status"]
    assert (after["state"], after["pid"], after["restarts"]) == (
        "running",
        before["status"]["pid"],
        before["status"]["restarts"],
    )


@pytest.fixture
def other_site(supervised: PageRun) -> Iterator[str]:
    """A page of another origin (another loopback port) that tries the supervisor's
    commands, even with the token (a leak): its address."""
    with serving_elsewhere(
        OTHER_SITE % {"target": supervised.base_url, "token": supervised.token}
    ) as address:
        yield address


def test_commands_from_another_origin_or_without_the_token_change_nothing(
    page: Watched, browser: Any, supervised: PageRun, other_site: str
) -> None:
    running = supervised.wait_view("chat", lambda view: view["status"]["state"] == "running")
    pid = running["status"]["pid"]
    context = browser.new_context()
    try:
        elsewhere = context.new_page()
        elsewhere.goto(other_site)
        elsewhere.wait_for_function("window.done === true", timeout=WAIT_MS)
        attempts = elsewhere.evaluate("window.attempts")
    finally:
        context.close()
    # no-cors answers are opaque (0); the token's header needs a preflight, refused
    assert attempts == {"page": 0, "api": 0, "with the token": "blocked", "read": "blocked"}
    base, token = supervised.base_url, supervised.token
    with httpx.Client(base_url=base) as client:
        bare = client.post("/ui/api/instances/chat/stop")
        foreign = client.post(
            "/ui/api/instances/chat/stop",
            headers={"Authorization": f"Bearer {token}", "Origin": other_site.rstrip("/")},
        )
    assert (bare.status_code, bare.json()["error"]["code"]) == (401, "unauthorized")
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (403, "cross-origin")
    time.sleep(0.5)  # a stop that got through would have begun by now
    after = supervised.views()["chat"]["status"]
    assert (after["state"], after["pid"]) == ("running", pid)
    assert psutil.pid_exists(pid)


def test_the_page_asks_for_the_token_it_lacks(browser: Any, supervised: PageRun) -> None:
    context = browser.new_context()
    try:
        bare = context.new_page()
        bare.set_default_timeout(WAIT_MS)
        bare.goto(f"{supervised.base_url}/ui/")
        bare.locator("#login").wait_for()
        assert bare.locator("#login-why").inner_text() == "the token was refused"
        assert bare.locator("#instances tbody tr").count() == 0
        bare.locator("#token").fill(supervised.token)
        bare.locator("#token-use").click()
        bare.locator('tr[data-name="chat"]').wait_for()
        assert bare.locator("#login").is_hidden()
    finally:
        context.close()


def test_inferactors_ui_serves_the_page_for_its_user(browser: Any, supervised: PageRun) -> None:
    """The README's ``inferactors ui`` command, on this run's file."""
    shown = readme_commands(supervised.run_file, supervised.where / "token")["ui"]
    command = [sys.executable, "-m", *shown]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with subprocess.Popen(command, **pipes) as door:  # type: ignore[call-overload]
        try:
            address = _door_address(door)
            _use_the_door(browser, address)
        finally:
            door.send_signal(signal.SIGINT)
            _, errors = door.communicate(timeout=30)
    assert door.returncode == 0, errors


def _door_address(door: subprocess.Popen[str]) -> str:
    """The address ``inferactors ui`` printed (its second line)."""
    assert door.stdout is not None
    lines = [door.stdout.readline() for _ in range(2)]
    address = lines[1].strip()
    if not re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/#token=\S+", address):
        door.kill()
        pytest.fail(f"inferactors ui printed {lines}, then: {door.communicate()}")
    return address


def _use_the_door(browser: Any, address: str) -> None:
    """The page through the door lists the instances and reloads in the CLI's words; its
    API needs the door's token, and only the page is served there."""
    context = browser.new_context()
    try:
        watched = watch(context)
        watched.page.goto(address)
        watched.row("flaky").wait_for()
        watched.page.locator("#reload").click()
        with watched.page.expect_response(lambda r: r.url.endswith("/ui/api/reload")) as answer:
            watched.page.locator("#confirm-ok").click()
        body = answer.value.json()
        watched.page.locator("#result-words").filter(has_text="nothing changed").wait_for()
        assert watched.page.locator("#result-words").inner_text() == CliWords().reload(
            body["result"]
        )
        assert watched.errors == []
    finally:
        context.close()
    base, token = address.split("/ui/#token=")
    with httpx.Client(base_url=base) as client:
        assert client.get("/ui/").status_code == 200
        assert client.get("/ui/api/instances/chat").status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert client.get("/ui/api/instances/chat", headers=bearer).status_code == 200
        assert client.get("/v1/instances", headers=bearer).status_code == 404  # the page only


def test_the_screenshot_of_a_real_run(page: Watched, tmp_path: Path) -> None:
    """The README's screenshot: the page with ``flaky``'s panel open, from this real run;
    written to docs/ui.png when INFERACTORS_SCREENSHOT=1."""
    if page.page.locator("#panel-name").inner_text() != "flaky":
        page.page.locator('button[data-open="flaky"]').click()
    page.page.locator("#panel #last-words").wait_for()
    if page.page.locator("#result").is_visible():
        page.page.locator("#result-close").click()
    with contextlib.suppress(AssertionError):  # between two lives: its colours show
        wait_until(lambda: page.cell("flaky", "state") in ("backoff", "starting"), 10, 0.01)
    shot = page.page.screenshot(full_page=True)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    target = SCREENSHOT if os.environ.get("INFERACTORS_SCREENSHOT") == "1" else tmp_path / "ui.png"
    kept_screenshot(target, shot)
    assert target.stat().st_size > 10_000


def test_the_readme_shows_the_screenshot_and_the_commands_run_here() -> None:
    """The README's web page section: its image is the screenshot this module takes (a
    PNG of a real page), and its commands are the ones `page_run` and
    `test_inferactors_ui_serves_the_page_for_its_user` run."""
    text = ROOT.joinpath("README.md").read_text()
    section = text[text.index("## The web page") : text.index("<!-- web-page:end -->")]
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", section)
    assert images == ["docs/ui.png"]
    assert ROOT / images[0] == SCREENSHOT
    shot = SCREENSHOT.read_bytes()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(shot) > 10_000
    width, height = int.from_bytes(shot[16:20], "big"), int.from_bytes(shot[20:24], "big")
    assert (width, height >= 600) == (1280, True)  # the page at the tests' viewport
    commands = readme_commands(Path("run.toml"), Path("token"))
    assert sorted(commands) == ["run", "ui"]
    assert commands["run"] == [
        "inferactors", "run", "run.toml", "--control-port", "0", "--control-token-file", "token"
    ]  # fmt: skip
    assert commands["ui"] == ["inferactors", "ui", "run.toml"]
    assert "[docs/web-page.md](docs/web-page.md)" in text
    assert (ROOT / "docs" / "web-page.md").is_file()


def test_the_readmes_token_recipe_makes_a_token_file_the_supervisor_takes(
    tmp_path: Path,
) -> None:
    """The README's lines before its ``--control-token-file token`` command, run as
    written in an empty directory, make ``token``: mode 0600, a token `read_token` takes
    (at least 16 printable characters)."""
    recipe = readme_token_recipe()
    assert recipe, "the README shows no way to make the token file"
    for line in recipe:
        subprocess.run(["sh", "-c", line], cwd=tmp_path, check=True, timeout=30)
    made = tmp_path / "token"
    assert made.stat().st_mode & 0o777 == 0o600
    assert len(read_token(made)) >= 16
