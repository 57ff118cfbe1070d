"""The HTTP probe of an inference server: health, model lists, identity and a one-token completion.

Two layers:

- pure functions that turn a status code and a body into a value (`classify_health`,
  `classify_models_status`, `classify_ollama_version`, `parse_model_ids`,
  `parse_ollama_version`, `completion_body`, `parse_completion`) and the values they return;
  no I/O, tested without an event loop; they live in `probe_parse.py`;
- `ProbeClient`, the one I/O edge (this module), on an injectable httpx transport so tests
  use ``httpx.MockTransport``. The runtime sees it through the `Prober` protocol.

Bounds: every request asks for ``Accept-Encoding: identity`` and a reply with any other
``Content-Encoding`` is refused unread (a gzip, deflate, br or zstd body is never decoded,
so a compression bomb allocates nothing); at most 1 MiB of a body is read, raw; and each
public call has ONE deadline, ``timeout_s`` from its start, for all of its requests
(`ProbeClient.report` makes up to three). Connections are kept alive, one idle per client,
and a GET that met a stale one is sent again within the deadline (``probe_wire``).

Errors::

    BackendError (inferactors._errors)
    ├── ProbeFailure       a request could not complete: transport error, timeout, body over
    │                      1 MiB or in a content encoding we did not ask for
    ├── DeepHealthTimeout  the one-token completion did not finish within the client's timeout
    └── RequestRefused     the completion was answered 401 or 403 (an API key is wanted)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, Self, assert_never

import attrs
import httpx
import trio

from .._errors import BackendError, DeepHealthTimeout, NoVerdict
from .._flavor import InferFlavor
from .._policy.lateness import no_verdict_report
from .._policy.probe_parse import (
    ListRead,
    classify_health,
    classify_models_status,
    classify_ollama_version,
    completion_body,
    json_object,
    parse_completion,
    parse_ollama_version,
    read_model_list,
    refusal,
)
from .._policy.probe_report import (
    CompletionResult,
    Health,
    ServerReport,
    Unhealthy,
    Unreachable,
    Up,
    serving,
)
from .probe_connect import Connect
from .probe_h11 import H11Wire
from .probe_wire import IDENTITY_HEADERS as IDENTITY_HEADERS
from .probe_wire import MAX_BODY_BYTES as MAX_BODY_BYTES
from .probe_wire import FailureKind as FailureKind
from .probe_wire import HttpxWire, Wire
from .probe_wire import ProbeFailure as ProbeFailure


class Prober(Protocol):
    """What the runtime needs from a server probe; `ProbeClient` is the HTTP implementation.

    ``report`` never raises for a server fault; ``tiny_completion`` raises BackendError or
    DeepHealthTimeout; ``props`` is None on any failure; ``aclose`` releases the connections.
    """

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport: ...
    async def tiny_completion(self, model: str | None) -> CompletionResult: ...
    async def props(self) -> Mapping[str, object] | None: ...
    async def aclose(self) -> None: ...


@attrs.define(eq=False)
class ProbeClient:
    """HTTP client for one server's probes; open it with `ProbeClient.open`.

    Never follows redirects, ignores proxy environment variables, keeps at most one idle
    connection alive for 3 s for its GETs (a GET that meets it closed by the server is sent
    again) and sends each POST on a connection of its own (never sent twice, never on a
    connection the server may be closing), asks for identity encoding and refuses any
    other, reads at most 1 MiB of a body, and bounds each public call, all its requests and
    bodies included, by one deadline ``timeout_s`` after the call starts. A timeout whose
    budget our own late loop ate gives no verdict (``_policy/lateness.py``). Usable as
    ``async with``; closing is idempotent.

    The wire is the lean h11 client (``probe_h11.H11Wire``) for a plain
    ``http://host:port``, and httpx (``probe_wire.HttpxWire``) when a transport is injected
    or the URL is of another kind (``https``, a path).
    """

    base_url: str
    timeout_s: float
    wire: Wire

    @classmethod
    def open(
        cls,
        base_url: str,
        *,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        connect: Connect | None = None,
    ) -> ProbeClient:
        """A client for ``base_url`` (for example ``http://127.0.0.1:8090``).

        Args:
            base_url: the server's root URL; request paths are joined to it.
            timeout_s: float seconds: connect, read and write timeout, and the deadline of each
                whole public call (every request it makes, bodies included).
            transport: an httpx transport to use instead of the network (tests pass
                ``httpx.MockTransport``); the client is then httpx's.
            headers: further headers sent with every request (`probe_auth.api_key_headers`:
                a server's API key); ``Accept-Encoding`` stays ``identity``.
            connect: opens a stream to the server instead of a TCP connect (tests pass
                in-memory streams); for the lean wire only.
        """
        wire: Wire | None = None
        if transport is None:
            try:
                wire = H11Wire.open(base_url, timeout_s=timeout_s, headers=headers, connect=connect)
            except ValueError:
                wire = None  # https, a path, ...: httpx serves it
        if wire is None:
            opened = HttpxWire.open
            wire = opened(base_url, timeout_s=timeout_s, transport=transport, headers=headers)
        return cls(base_url=base_url, timeout_s=timeout_s, wire=wire)

    async def aclose(self) -> None:
        """Close the wire's connections; idempotent."""
        await self.wire.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def get(self, path: str, *, deadline: float | None = None) -> tuple[int, bytes]:
        """``GET path``; return ``(status, body)``.

        Args:
            path: the request path.
            deadline: trio time by which the reply must be complete; default ``timeout_s``
                from now.

        Raises:
            ProbeFailure: transport error, timeout, a body over 1 MiB or encoded.
        """
        return await self._exchange("GET", path, None, deadline)

    async def post_json(
        self, path: str, body: Mapping[str, object], *, deadline: float | None = None
    ) -> tuple[int, bytes]:
        """``POST path`` with ``body`` as JSON (with Content-Length); return ``(status, body)``.

        ``deadline`` is as in `get`.

        Raises:
            ProbeFailure: transport error, timeout, a body over 1 MiB or encoded.
        """
        return await self._exchange("POST", path, body, deadline)

    async def report(self, flavor: InferFlavor, *, stretch_s: float = 0.0) -> ServerReport:
        """Probe the server as ``flavor`` speaks.

        llama.cpp and mlx-lm: ``GET /health`` (404 or 501 falls back to ``GET /v1/models``), then,
        only when `Up`, the ids of ``/v1/models``. Ollama: ``GET /api/version``, then, only when
        `Up`, ``/api/tags`` into ``models`` and ``/api/ps`` into ``loaded``. A failed list
        request leaves its field empty; a model list that could not be read (failed, late,
        malformed) says why in ``models_problem``. Never raises for a server fault:
        transport errors and timeouts become `Unreachable`, a body over 1 MiB or encoded
        `Unhealthy`. When any of its requests lost its deadline to our own late loop
        (``_policy/lateness.py``) the whole report gives no verdict
        (`ServerReport.no_verdict`): a late model list is not a "models problem".

        One deadline, ``timeout_s`` from the call, bounds every request it makes: a server
        that trickles each reply just under the timeout still costs at most ``timeout_s``.
        ``stretch_s`` (float seconds, for a server whose probes long gave no verdict:
        ``_policy/lateness.py`` `VerdictBound`) moves that deadline later; a request that
        reaches it is judged on ``timeout_s`` minus our own lateness (`judges_timeout`).
        """
        deadline = trio.current_time() + self.timeout_s + max(0.0, stretch_s)
        match flavor:
            case InferFlavor.LLAMACPP | InferFlavor.MLX_LM:
                return await self._report_openai(deadline)
            case InferFlavor.OLLAMA:
                return await self._report_ollama(deadline)
            case _:
                assert_never(flavor)

    async def props(self) -> Mapping[str, object] | None:
        """llama-server's ``GET /props`` JSON object (``build_info``, ``model_path``, ...).

        None on any failure: transport error, non-200 status, or a body that is not a JSON
        object.
        """
        try:
            status, body = await self.get("/props")
        except ProbeFailure:
            return None
        return json_object(body) if status == 200 else None

    async def build_info(self) -> str | None:
        """``/props`` ``build_info`` (``"b<build>-<commit>"``), or None if unavailable."""
        props = await self.props()
        value = None if props is None else props.get("build_info")
        return value if isinstance(value, str) else None

    async def tiny_completion(self, model: str | None) -> CompletionResult:
        """Ask for one token through ``POST /v1/chat/completions`` (body: `completion_body`):
        the truth about a server whose ``/health`` may say 200 while completions hang.

        Raises:
            DeepHealthTimeout: no complete reply within ``timeout_s``; the message names it.
            NoVerdict: the deadline fired, but our own late loop ate its budget
                (``_policy/lateness.py``): nothing is known about the server.
            BackendError: transport error, body over 1 MiB, non-200 reply or malformed body
                (see `parse_completion`); messages start with ``"deep health: "``.
        """
        started = trio.current_time()
        try:
            status, body = await self.post_json("/v1/chat/completions", completion_body(model))
        except ProbeFailure as exc:
            if exc.kind == "timeout":
                raise DeepHealthTimeout(
                    f"deep health: completion did not finish within {self.timeout_s:g} s"
                ) from exc
            if exc.kind == "overloaded":
                raise NoVerdict(f"deep health: {exc.why}") from exc
            raise BackendError(f"deep health: {exc.why}") from exc
        text, finish_reason = parse_completion(status, body)
        return CompletionResult(text, trio.current_time() - started, finish_reason)

    async def _report_openai(self, deadline: float) -> ServerReport:
        started = trio.current_time()
        health, fallback, refused = await self._openai_health(deadline)
        latency_s = trio.current_time() - started
        if not serving(health):  # a busy server serves: its list is read too
            return ServerReport(health, latency_s=latency_s, refused=refused)
        if fallback is None:
            try:
                listed, refused = await self._list_once("/v1/models", deadline)
            except ProbeFailure as late:  # our own loop ate its deadline: health stands
                return no_verdict_report(late.why, latency_s, health)
            models, problem, router = listed
        else:
            models, problem, router = read_model_list("/v1/models", *fallback)
        return ServerReport(
            health,
            models=models,
            latency_s=latency_s,
            models_problem=problem,
            router=router,
            refused=refused,
        )

    async def _openai_health(
        self, deadline: float
    ) -> tuple[Health, tuple[int, bytes] | None, str | None]:
        """Health, the ``/v1/models`` status and body when the fallback (``/health`` 404 or
        501) already fetched them, and whether the request was refused for want of an API
        key (`refusal`)."""
        try:
            status, body = await self.get("/health", deadline=deadline)
            health = classify_health(status, body)
            if health is not None:
                return health, None, refusal(status, body)
            status, body = await self.get("/v1/models", deadline=deadline)
        except ProbeFailure as exc:
            return failure_health(exc), None, None
        return classify_models_status(status), (status, body), refusal(status, body)

    async def _report_ollama(self, deadline: float) -> ServerReport:
        started = trio.current_time()
        try:
            status, body = await self.get("/api/version", deadline=deadline)
        except ProbeFailure as exc:
            return ServerReport(failure_health(exc), latency_s=trio.current_time() - started)
        latency_s = trio.current_time() - started
        health = classify_ollama_version(status)
        if not isinstance(health, Up):
            return ServerReport(health, latency_s=latency_s)
        try:
            models, problem, _ = await self._list("/api/tags", deadline)
            loaded, _, _ = await self._list("/api/ps", deadline)
        except ProbeFailure as late:  # our own loop ate its deadline: health stands
            return no_verdict_report(late.why, latency_s, health)
        version = parse_ollama_version(body)
        return ServerReport(health, models, loaded, version, latency_s, problem)

    async def _list(self, path: str, deadline: float) -> ListRead:
        """The ids a list endpoint names, why it could not be read (`model_list_problem`;
        a request that failed or timed out is unreadable too) and its router entries
        (`read_model_list`).

        Raises:
            ProbeFailure: kind ``"overloaded"``: the read lost its deadline to our own late
                loop, which says nothing about the list (the caller's report gives no
                verdict, `no_verdict_report`).
        """
        return (await self._list_once(path, deadline))[0]

    async def _list_once(self, path: str, deadline: float) -> tuple[ListRead, str | None]:
        """`_list`, and whether the request was refused for want of an API key (`refusal`)."""
        try:
            status, body = await self.get(path, deadline=deadline)
        except ProbeFailure as exc:
            if exc.kind == "overloaded":
                raise
            return ((), f"model list unreadable: {exc.why}", ()), None
        return read_model_list(path, status, body), refusal(status, body)

    async def _exchange(
        self, method: str, path: str, body: Mapping[str, object] | None, deadline: float | None
    ) -> tuple[int, bytes]:
        if deadline is None:
            deadline = trio.current_time() + self.timeout_s
        return await self.wire.exchange(method, path, body, deadline)


def failure_health(exc: ProbeFailure) -> Health:
    """What a failed health request says: `Unhealthy` when the server answered unusably
    (`ProbeFailure.answered`), else `Unreachable`; ``why`` is the failure's."""
    if exc.answered:
        return Unhealthy(exc.why)
    return Unreachable(exc.why, overloaded=exc.kind == "overloaded")


class ProberFactory(Protocol):
    """Opens a prober for a base URL with a timeout in seconds (the HTTP edge, swappable);
    ``headers`` go with every request (`probe_auth.with_api_key`)."""

    def __call__(
        self, base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober: ...


async def probe_once(
    open_prober: ProberFactory, base: str, timeout_s: float, flavor: InferFlavor
) -> ServerReport:
    """One probe of ``base`` with a fresh client, closed afterwards."""
    prober = open_prober(base, timeout_s)
    try:
        return await prober.report(flavor)
    finally:
        await prober.aclose()
