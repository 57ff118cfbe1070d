"""The page's own script in a real headless browser (Debian's chromium, driven by
Playwright) against a fake fleet served in a thread (`e2e.web_page_fake`): a chatty log
keeps the tab answering with the view capped by lines, and the live stream's reconnect wait
starts again after a good connection."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.web_page_browser import open_browser, wait_until, watch
from e2e.web_page_fake import fake_page
from service.ui_support import PageFleet

pytestmark = pytest.mark.xdist_group("web-page")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with open_browser() as opened:
        yield opened


FLOOD_PER_S = 250.0
"""Log lines a second of the chatty server in the log view's test (a verbose server)."""
FLOOD_S = 8.0
"""How long it floods: 2,000 lines, the view's whole cap, on top of a tail of 500."""
LOG_CAP = 2000
"""The most lines the log view holds (``MAX_LOG_LINES`` in the page's script)."""


def test_a_chatty_log_keeps_the_page_answering_and_the_view_capped_by_lines(
    browser: Any, tmp_path: Path
) -> None:
    """250 lines a second for 8 s, after a tail of 500: a call into the page still answers
    within a second all along, and the view holds the newest `LOG_CAP` lines, no more
    (before, the cap counted batches, and the tab stopped answering)."""
    fleet = PageFleet()
    for number in range(500):
        fleet.add_line("chat", f"tail {number}")
    with fake_page(tmp_path, fleet) as served:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            watched = watch(context)
            watched.page.goto(served.page_url)
            watched.page.locator('button[data-open="chat"]').click()
            log = watched.page.locator("#log")
            wait_until(lambda: "tail 499" in log.inner_text())
            wait_until(lambda: served.follows() == 2)  # the live stream and the log
            slowest = 0.0
            flooding = threading.Thread(target=served.flood, args=("chat", FLOOD_PER_S, FLOOD_S))
            flooding.start()
            while flooding.is_alive():
                began = time.monotonic()
                assert watched.page.evaluate("1 + 1") == 2
                slowest = max(slowest, time.monotonic() - began)
                time.sleep(0.5)
            flooding.join()
            last = f"line {int(FLOOD_PER_S * FLOOD_S) - 1} "
            wait_until(lambda: last in log.inner_text())
            held = watched.page.evaluate(
                "document.getElementById('log').textContent.split('\\n').length - 1"
            )
            at_bottom = watched.page.evaluate(
                "(() => { const l = document.getElementById('log');"
                " return l.scrollHeight - l.scrollTop - l.clientHeight < 30; })()"
            )
            assert watched.errors == []
        finally:
            context.close()
    assert slowest < 1.0, f"a call into the page took {slowest:.2f} s"
    assert held == LOG_CAP, held
    assert at_bottom  # it followed


def test_the_reconnect_wait_starts_again_after_a_good_connection(
    browser: Any, tmp_path: Path
) -> None:
    """The live stream fails four times (the page waits 0.5, 1, 2, 4 s between tries),
    then one connection works and ends: the next try comes after the first wait again,
    not after 8 s (before, the wait only ever doubled)."""
    tries: list[float] = []
    table = json.dumps({"rows": [], "door": None, "now": 0.0})

    def stream(route: Any) -> None:
        tries.append(time.monotonic())
        if len(tries) <= 4:
            route.fulfill(status=503, body="down")
        else:
            sse = f"event: rows\ndata: {table}\n\n"
            route.fulfill(status=200, content_type="text/event-stream", body=sse)

    with fake_page(tmp_path, PageFleet()) as served:
        context = browser.new_context()
        try:
            context.route("**/ui/api/stream", stream)
            opened = context.new_page()
            opened.goto(served.page_url)
            deadline = time.monotonic() + 40.0
            while len(tries) < 6 and time.monotonic() < deadline:
                opened.wait_for_timeout(50)  # Playwright calls the route while it waits
        finally:
            context.close()
    waits = [later - earlier for earlier, later in itertools.pairwise(tries)]
    assert waits[3] > 3.0, waits  # the backoff grew while it failed
    assert waits[4] < 2.0, waits  # and started again after the good connection
