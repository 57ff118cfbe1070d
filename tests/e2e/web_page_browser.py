"""The browser side of the web page's tests: Debian's Chromium, headless, driven by
Playwright (`open_browser`, or a skip that says why none can be had), a page whose console
errors are kept (`Watched`), and a page of another origin (`serving_elsewhere`)."""

from __future__ import annotations

import http.server
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (``make setup`` installs it, as root, when missing)."""
CHROMIUM_FLAGS = (
    "--no-sandbox",  # as root, Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no connection anywhere but the page's own
    "--disable-component-update",
    "--disable-sync",
)
WAIT_MS = 30_000
"""How long an expectation of the page may take on a busy machine, milliseconds."""


@attrs.define(eq=False)
class Watched:
    """The page every test shares, with the errors its console said."""

    page: Any
    errors: list[str] = attrs.Factory(list)

    def row(self, name: str) -> Any:
        return self.page.locator(f'tr[data-name="{name}"]')

    def cell(self, name: str, cell: str) -> str:
        text: str = self.row(name).locator(f'[data-cell="{cell}"]').inner_text()
        return text.strip()


def watch(context: Any) -> Watched:
    """A new page of ``context`` whose console errors and uncaught exceptions are kept."""
    watched = Watched(context.new_page())
    watched.page.set_default_timeout(WAIT_MS)

    def on_console(message: Any) -> None:
        if message.type == "error":
            watched.errors.append(f"console: {message.text}")

    watched.page.on("console", on_console)
    watched.page.on("pageerror", lambda error: watched.errors.append(f"uncaught: {error}"))
    return watched


def wait_until(check: Any, within_s: float = 30.0, every_s: float = 0.05) -> Any:
    """``check()``'s first true value, polled."""
    deadline = time.monotonic() + within_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"still not so after {within_s} s")
        time.sleep(every_s)
    return value


SEEN_CHANGE = """([name, pid]) => {
  window.changeSeenAt = null;
  const row = document.querySelector(`tr[data-name="${name}"]`);
  const changed = () => row.dataset.state !== "running" ||
    row.querySelector('[data-cell="pid"]').textContent !== String(pid);
  new MutationObserver((_, observer) => {
    if (window.changeSeenAt === null && changed()) {
      window.changeSeenAt = Date.now();
      observer.disconnect();
    }
  }).observe(row, { subtree: true, childList: true, characterData: true, attributes: true });
}"""


OTHER_SITE = """<!doctype html><script>
const target = %(target)r;
window.attempts = {};
async function attempt(name, path, init) {
  try { window.attempts[name] = (await fetch(target + path, init)).status; }
  catch (error) { window.attempts[name] = "blocked"; }
}
(async () => {
  await attempt("page", "/ui/api/instances/chat/stop", { method: "POST", mode: "no-cors" });
  await attempt("api", "/v1/instances/chat/stop",
    { method: "POST", mode: "no-cors", body: "x", headers: { "Content-Type": "text/plain" } });
  await attempt("with the token", "/ui/api/instances/chat/stop",
    { method: "POST", headers: { Authorization: "Bearer %(token)s" } });
  await attempt("read", "/ui/api/instances/chat", {});
  window.done = true;
})();
</script>"""


@contextmanager
def serving_elsewhere(html: str) -> Iterator[str]:
    """``html`` served on another loopback port (another origin): its address."""

    class Site(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(html.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def browser_missing() -> str | None:
    """Why no browser is here, else None."""
    if not os.access(CHROMIUM, os.X_OK):
        return (
            f"no browser: {CHROMIUM} is not installed (`make setup` installs Debian's "
            "chromium with apt-get when it runs as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no browser driver: the playwright package is missing (pip install -e '.[dev]')"
    return None


def browser_can_be_had() -> bool:
    """Whether `make setup` could install the browser here: as root, with apt-get."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


@contextmanager
def open_browser() -> Iterator[Any]:
    """Debian's Chromium, headless, with a new empty profile (Playwright makes one). When
    it is missing: a skip naming what is missing where it cannot be installed (not root,
    or no apt-get), else a failure saying how to install it."""
    why = browser_missing()
    if why is not None:
        if browser_can_be_had():
            pytest.fail(f"{why}; run `make setup`")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_FLAGS)
        )
        try:
            yield browser
        finally:
            browser.close()


def kept_screenshot(path: Path, shot: bytes) -> None:
    """Write ``shot`` to ``path`` (the README's screenshot), through a temporary file."""
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(shot)
    shutil.move(temporary, path)
