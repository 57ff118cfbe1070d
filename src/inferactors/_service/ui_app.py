"""The supervisor's web page: `WebPage`, routes under ``/ui`` served beside the control
API by the same app (``control_app.py``), on the Unix socket and on the loopback TCP
listener (``docs/web-page.md``).

Routes::

    GET  /ui/                                the page (HTML; its script and style below)
    GET  /ui/static/{app.js,app.css}         the page's assets, shipped in the package
    GET  /ui/api/stream                      SSE: ``rows`` (every instance, and the front
                                             door's residency) now, then ``changes`` (the
                                             rows that changed, from the table every page
                                             shares: ``ui_table.py``) on every change,
                                             ``event`` (each event, dated, in words),
                                             ``sample`` (each usage reading, taken while
                                             a page watches)
    GET  /ui/api/instances/{name}            its row, dated timeline, series (plots), its
                                             last diagnosis and last lines
    GET  /ui/api/instances/{name}/logs       SSE: ``lines`` (its log's tail, then each
                                             batch of new lines), ``note`` (no log kept)
    POST /ui/api/instances/{name}/start      ``{"ok", "words", "result"}``  (also stop,
    POST /ui/api/reload                      restart), words as the CLI prints them

The page and its assets hold nothing private: over TCP they are served without the token
(`WebPage.open_to_all`); every ``/ui/api`` route needs it, as the API does, and a browser's
command must come from the same origin (``control_access.py``). The page reads its token
from the address's fragment (``#token=...``, never sent to a server), keeps it in the
tab's session storage and sends it as ``Authorization: Bearer``; a page of another origin
can neither read it nor send that header without a CORS preflight, which is not answered.
Reads never change anything. The page's Content-Security-Policy lets it load and connect
to its own origin only: nothing is fetched from the network.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import attrs
import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .._config.convert_api import api_data, event_data
from .._edges.log_ring import LogLine
from .._errors import InferactorsError
from .._events import Event, instance_of
from .control_access import READS, error_body
from .control_app import ERROR_STATUS
from .ui_history import STEP_S, WINDOW_S, Dated, UiHistory, failure
from .ui_rows import row
from .ui_stream import EventStream, SseSender
from .ui_table import RowTable, TableSource
from .ui_words import JsonWords, PageWords
from .views import InstanceView, ReloadResult

LOG_TAIL = 500
"""How many of its last log lines the log view opens with."""
LOG_BATCH = 500
"""The most log lines one ``lines`` event carries (a flood is sent in batches)."""
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
"""The page's assets (in ``ui_page/`` beside this module) and their media types."""
_ASSET_PATHS = frozenset(f"/ui/static/{name}" for name in ASSETS)
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Headers of the page and its assets: its own origin only, never framed, not cached."""


class PageSource(TableSource, Protocol):
    """What the page reads of a `Fleet` and asks of it."""

    @property
    def history(self) -> UiHistory: ...

    def views(self) -> tuple[InstanceView, ...]: ...
    def name_of(self, instance_id: str) -> str | None: ...
    def view(self, name: str) -> InstanceView: ...
    async def start(self, name: str) -> InstanceView: ...
    async def stop(self, name: str) -> InstanceView: ...
    async def restart(self, name: str) -> InstanceView: ...
    async def reload(self) -> ReloadResult: ...
    async def until_changed(self) -> None: ...
    def log_tail(self, name: str, lines: int) -> tuple[LogLine, ...]: ...
    def follow_logs(
        self, name: str
    ) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[LogLine]]: ...
    def follow_events(
        self,
    ) -> contextlib.AbstractContextManager[trio.MemoryReceiveChannel[Event]]: ...


def open_to_all(method: str, path: str) -> bool:
    """Whether a request holds nothing private: a read of the page or one of its assets,
    named exactly (a path that only starts like an asset's is not open)."""
    return method in READS and (path in ("/ui", "/ui/") or path in _ASSET_PATHS)


def _no_budget() -> int | None:
    return None


@attrs.frozen
class WebPage:
    """The web page over ``source`` (module docstring).

    Attributes:
        source: The fleet.
        words: How results and events are said (`PageWords`).
        budget: The front door's memory budget in bytes, None when none is known.
        table: The rows every stream of this page shares (``ui_table.py``).
    """

    source: PageSource
    words: PageWords = JsonWords()  # noqa: RUF009  (frozen value)
    budget: Callable[[], int | None] = _no_budget
    table: RowTable = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: RowTable(self.source, self.budget), takes_self=True),
    )

    @classmethod
    def of_fleet(cls, fleet: Any, words: PageWords | None = None) -> WebPage:
        """The page of a `Fleet`: the budget from its front door's scheduler."""

        def budget() -> int | None:
            scheduler = fleet.door.scheduler if fleet.door is not None else None
            return None if scheduler is None else scheduler.budget().memory

        return cls(fleet, words or JsonWords(), budget)

    def open_to_all(self, method: str, path: str) -> bool:
        """`open_to_all`."""
        return open_to_all(method, path)

    def routes(self) -> list[BaseRoute]:
        """The page's routes (module docstring)."""
        act = self._act
        return [
            Route("/ui", _to_page),
            Route("/ui/", _page),
            Route("/ui/static/{asset}", _asset),
            Route("/ui/api/stream", self._stream),
            Route("/ui/api/instances/{name}", self._instance),
            Route("/ui/api/instances/{name}/logs", self._logs),
            Route("/ui/api/instances/{name}/start", act("start"), methods=["POST"]),
            Route("/ui/api/instances/{name}/stop", act("stop"), methods=["POST"]),
            Route("/ui/api/instances/{name}/restart", act("restart"), methods=["POST"]),
            Route("/ui/api/reload", self._reload, methods=["POST"]),
        ]

    # Reads.

    def rows(self) -> dict[str, Any]:
        """Every instance's row, the front door's residency (None without one), and the
        wall-clock time now (`RowTable.table`)."""
        return self.table.table()

    async def _stream(self, request: Request) -> Response:
        return EventStream(self._produce_stream)

    async def _produce_stream(self, sse: SseSender) -> None:
        table = self.table
        with self.source.follow_events() as events, self.source.history.watching():
            first = table.table()
            seen = table.version
            await sse.event("rows", first)
            send, receive = trio.open_memory_channel[tuple[str, Any]](64)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_events, events, send.clone())
                nursery.start_soon(self._pump, self.source.until_changed, False, send.clone())
                nursery.start_soon(self._pump, self.source.history.until_sampled, True, send)
                async for name, data in receive:
                    if name == "end":
                        break
                    if name in ("rows", "sample"):
                        table.refresh()  # once per change, whichever page comes first
                    if name == "sample":
                        data = table.sample()
                    if name == "rows":  # only what changed since the last table sent
                        name, data, seen = "changes", table.changes_since(seen), table.version
                        if data is None:
                            continue
                    await sse.event(name, data)
                nursery.cancel_scope.cancel()

    async def _pump_events(
        self, events: trio.MemoryReceiveChannel[Event], out: trio.MemorySendChannel[Any]
    ) -> None:
        """Each event, dated and in words, then ``end`` once the fleet closed."""
        async with out:
            async for event in events:
                await out.send(("event", self._event_item(event)))
            await out.send(("end", None))

    async def _pump(
        self, wait: Callable[[], Awaitable[None]], sampled: bool, out: trio.MemorySendChannel[Any]
    ) -> None:
        """The rows after each change (``wait`` returned), and the readings after each
        sample."""
        async with out:
            while True:
                await wait()
                if sampled:
                    await out.send(("sample", None))
                await out.send(("rows", None))

    def _event_item(self, event: Event) -> dict[str, Any]:
        iid = instance_of(event)
        name = None if iid is None else self.source.name_of(iid)
        return self._dated(Dated(self.source.history.wall_of(event), event), name)

    def _dated(self, dated: Dated, name: str | None) -> dict[str, Any]:
        return {
            "instance": name,
            "at": dated.at,
            "type": type(dated.event).__name__,
            "words": self.words.event(dated.event, name),
            "failed": failure(dated.event),
            "data": event_data(dated.event),
        }

    async def _instance(self, request: Request) -> Response:
        name = request.path_params["name"]
        view = self.source.view(name)  # UnknownInstance: 404
        history = self.source.history
        failed = history.last_failure(name)
        return JSONResponse(
            {
                "row": row(view, history),
                "timeline": [self._dated(dated, name) for dated in history.timeline(name)],
                "series": history.series(name),
                "window_s": WINDOW_S,
                "step_s": STEP_S,
                "now": history.wall(),
                "last_failure": None if failed is None else self._dated(failed, name),
            }
        )

    async def _logs(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.source.view(name)  # UnknownInstance: 404
        return EventStream(functools.partial(self._produce_logs, name))

    async def _produce_logs(self, name: str, sse: SseSender) -> None:
        tail = [api_data(line) for line in self.source.log_tail(name, LOG_TAIL)]
        with contextlib.ExitStack() as stack:
            try:  # no checkpoint between the tail and the subscription: no line is lost
                lines = stack.enter_context(self.source.follow_logs(name))
            except InferactorsError as error:
                await sse.event("lines", tail)
                await sse.event("note", f"no output is kept for {name}: {error}")
                return
            await sse.event("lines", tail)
            async for first in lines:
                await sse.event("lines", [api_data(line) for line in _batch(first, lines)])

    # Commands.

    def _act(self, verb: str) -> Callable[[Request], Awaitable[Response]]:
        act: Callable[[str], Awaitable[InstanceView]] = getattr(self.source, verb)

        async def handle(request: Request) -> Response:
            try:
                view = await act(request.path_params["name"])
            except InferactorsError as error:
                return self._failed(verb, error)
            data = api_data(view)
            return JSONResponse(
                {"ok": True, "words": self.words.instance(verb, data), "result": data}
            )

        return handle

    async def _reload(self, request: Request) -> Response:
        try:
            result = await self.source.reload()
        except InferactorsError as error:
            return self._failed("reload", error)
        data = api_data(result)
        ok = not result.refused
        return JSONResponse({"ok": ok, "words": self.words.reload(data), "result": data})

    def _failed(self, verb: str, error: InferactorsError) -> Response:
        status = next(code for cl, code in ERROR_STATUS if isinstance(error, cl))
        body = {"ok": False, "words": self.words.failed(verb, error.code, str(error))}
        return JSONResponse({**body, **error_body(error.code, str(error))}, status_code=status)


def _batch(first: LogLine, lines: trio.MemoryReceiveChannel[LogLine]) -> Iterator[LogLine]:
    """``first`` and the lines already waiting behind it, at most `LOG_BATCH` in all."""
    yield first
    for _ in range(LOG_BATCH - 1):
        try:
            yield lines.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return


async def _to_page(request: Request) -> Response:
    return RedirectResponse("/ui/", status_code=308)


async def _page(request: Request) -> Response:
    return Response(
        _read("index.html"), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS
    )


async def _asset(request: Request) -> Response:
    name = request.path_params["asset"]
    if name not in ASSETS:
        return JSONResponse(error_body("not-found", f"no asset {name!r}"), status_code=404)
    return Response(_read(name), media_type=ASSETS[name], headers=PAGE_HEADERS)


@functools.cache
def _read(name: str) -> bytes:
    """One of the page's files, read once from the package."""
    return (importlib.resources.files(__package__) / "ui_page" / name).read_bytes()
