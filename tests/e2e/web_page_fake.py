"""The web page over a fake fleet (``service.ui_support.PageFleet``), served by the real
control server on a loopback port in a thread of its own (`FakePage`): for what a real
server does not do on cue, such as writing log lines at a set rate for a set time."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import attrs
import trio

from inferactors._cli.ui_words import CliWords
from inferactors._service.control_server import serve_control
from inferactors._service.ui_app import WebPage
from service.ui_support import PageFleet


@attrs.define(eq=False)
class FakePage:
    """The page at ``base_url`` (token ``token``) over ``fleet``, run by ``token_of``'s
    trio loop: call into it with `call`."""

    fleet: PageFleet
    base_url: str
    token: str
    trio_token: trio.lowlevel.TrioToken

    @property
    def page_url(self) -> str:
        return f"{self.base_url}/ui/#token={self.token}"

    def flood(self, name: str, lines_per_s: float, seconds: float, width: int = 200) -> None:
        """Write ``name``'s log lines at ``lines_per_s`` (10 per tick) for ``seconds``;
        returns when done. Line ``n`` reads ``line n `` then filler to ``width``."""
        trio.from_thread.run(
            partial(_flood, self.fleet, name, lines_per_s, seconds, width),
            trio_token=self.trio_token,
        )

    def follows(self) -> int:
        """How many follow streams are open."""
        return trio.from_thread.run_sync(
            lambda: self.fleet.open_follows, trio_token=self.trio_token
        )


async def _flood(fleet: PageFleet, name: str, per_s: float, seconds: float, width: int) -> None:
    tick = 10 / per_s
    for number in range(int(per_s * seconds)):
        if number % 10 == 0:
            await trio.sleep(tick)
        text = f"line {number} "
        try:
            fleet.add_line(name, text + "x" * (width - len(text)))
        except trio.WouldBlock:  # the follower fell 100 lines behind: the ring drops too
            pass


@contextmanager
def fake_page(where: Path, fleet: PageFleet) -> Iterator[FakePage]:
    """Serve the page over ``fleet`` on 127.0.0.1 (state in ``where``) until the block ends."""
    token = secrets.token_urlsafe(24)
    token_file = where / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    ready: list[FakePage] = []
    started = threading.Event()
    stop: list[trio.Event] = []

    async def serve() -> None:
        stop.append(trio.Event())
        page = WebPage(fleet, CliWords())
        control = partial(
            serve_control, fleet, state_dir=where, tcp_port=0, token_file=token_file, page=page
        )
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(control)
            ready.append(FakePage(fleet, binds[1], token, trio.lowlevel.current_trio_token()))
            started.set()
            await stop[0].wait()
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    if not started.wait(30.0):
        raise AssertionError("the fake page did not start within 30 s")
    try:
        yield ready[0]
    finally:
        trio.from_thread.run_sync(stop[0].set, trio_token=ready[0].trio_token)
        thread.join(10.0)
