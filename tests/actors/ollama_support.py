"""What the Ollama tests share: the model's names, the request log's vocabulary, and the rig.

The registry names the model ``tiny-model``; Ollama knows it by the tag ``tiny:latest``
(checklist 64). Timing tests run the Ollama actor under its real supervisor with trio's
``MockClock(autojump_threshold=0)``, talking to the fake Ollama through
``FakeOllama.transport`` (no socket), so loads of minutes and lingering unloads take no
real time; `rig` builds that. The rest go through `open_runtime` to a fake Ollama on a real
loopback socket (`spec_at` points a spec at it). Their fixtures, ``fake`` and
``registry_file``, are in this folder's conftest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

import attrs
import httpx
import trio
import trio.testing

from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InstanceStatus,
    ManagedConfig,
    ModelRegistry,
    RunEvidence,
    ServeArgs,
    StateChanged,
    Supervision,
)
from inferactors._actors.admission import make_plan
from inferactors._actors.messages import (
    DeepHealth,
    GetHealth,
    GetStatus,
    Load,
    ReplyTo,
    Route,
    Start,
    Stop,
    Subscribe,
    Unload,
    call,
)
from inferactors._actors.ollama import OllamaActor
from inferactors._actors.ollama.actor import WATCH_INTERVAL_S
from inferactors._actors.supervisor import Supervisor
from inferactors._edges.bundle import Edges, ProbeTimed, http_prober_factory, ignore_probe
from inferactors._edges.ollama_client import OllamaApi, OllamaClient
from inferactors._events import Event
from inferactors._policy.admission import Plan, resolve_supervision
from inferactors._policy.probe_report import CompletionResult, ServerReport
from inferactors.testing._fake_ollama import FakeOllama, FakeRequest

T = TypeVar("T")

NAME = "tiny-model"
"""The registry name; Ollama knows the model by `TAG` (checklist 64)."""
TAG = "tiny:latest"
RUNNER_TIMEOUT = "timed out waiting for llama runner to start - progress 0.00 - "
ALLOWED = {
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("GET", "/api/ps"),
    ("POST", "/api/generate"),
    ("POST", "/v1/chat/completions"),
}
SURVEY = [("GET", "/api/version", None), ("GET", "/api/tags", None), ("GET", "/api/ps", None)]
PS = ("GET", "/api/ps", None)


def requests(fake: FakeOllama) -> list[tuple[str, str, object]]:
    """What the fake received, with the JSON body of each POST."""
    return [(r.method, r.path, r.json if r.method == "POST" else None) for r in fake.requests]


def load_body(keep_alive: str | int) -> dict[str, object]:
    return {"model": TAG, "prompt": "", "stream": False, "keep_alive": keep_alive}


UNLOAD = {"model": TAG, "keep_alive": 0}


def loads(fake: FakeOllama) -> list[FakeRequest]:
    """Our load requests (``prompt`` empty, keep_alive not 0)."""
    return [
        r
        for r in fake.requests
        if r.path == "/api/generate"
        and isinstance(r.json, dict)
        and r.json.get("prompt") == ""
        and r.json.get("keep_alive") != 0
    ]


def unloads(fake: FakeOllama) -> list[FakeRequest]:
    return [r for r in fake.requests if r.path == "/api/generate" and r.json == UNLOAD]


def assert_allowed(fake: FakeOllama) -> None:
    """Checklist 70: never /api/pull, /api/delete or an HTTP DELETE."""
    seen = {(r.method, r.path) for r in fake.requests}
    assert seen <= ALLOWED, seen - ALLOWED
    assert all(r.method != "DELETE" for r in fake.requests)


# --- the rig: the Ollama actor under its supervisor, the fake behind a transport -----------


@attrs.define
class Line:
    """The fake Ollama behind a socketless transport that can be cut (``down``) and whose
    ``/api/ps`` answers can be slowed (``ps_delay_s``)."""

    fake: FakeOllama
    down: bool = False
    ps_delay_s: float = 0.0

    def transport(self) -> httpx.MockTransport:
        inner = self.fake.transport()

        async def handle(request: httpx.Request) -> httpx.Response:
            if self.down:
                raise httpx.ConnectError("connection refused", request=request)
            if request.url.path == "/api/ps":
                await trio.sleep(self.ps_delay_s)
            return await inner.handle_async_request(request)

        return httpx.MockTransport(handle)

    def open(self, base_url: str, timeout_s: float, load_timeout_s: float) -> OllamaApi:
        return OllamaClient.open(
            base_url, timeout_s=timeout_s, load_timeout_s=load_timeout_s, transport=self.transport()
        )


@attrs.define(eq=False)
class Rig:
    """A managed Ollama instance served by a real `Supervisor`, commanded as the facade does."""

    line: Line
    supervisor: trio.MemorySendChannel[object]
    actor: OllamaActor
    events: trio.MemoryReceiveChannel[Event]
    seen: list[Event] = attrs.Factory(list)

    @property
    def fake(self) -> FakeOllama:
        return self.line.fake

    async def route(self, make: Callable[[ReplyTo[T]], object]) -> T:
        iid = self.actor.instance_id

        def routed(reply: ReplyTo[T]) -> Route:
            return Route(iid, make(reply))  # type: ignore[arg-type]

        return await call(self.supervisor, routed)

    async def start(self) -> None:
        await self.route(Start)

    async def stop(self, grace_s: float = 10.0) -> RunEvidence:
        return await self.route(partial(Stop, grace_s))

    async def status(self) -> InstanceStatus:
        return await self.route(GetStatus)

    async def health(self) -> ServerReport:
        return await self.route(GetHealth)

    async def deep_health(self) -> CompletionResult:
        return await self.route(DeepHealth)

    async def unload(self) -> None:
        await call(self.supervisor, partial(Unload, self.actor.instance_id))

    async def start_running(self) -> StateChanged:
        """`start`, then the change to Running within 60 (virtual) seconds."""
        await self.start()
        with trio.fail_after(60):
            return await self.until(InstanceState.RUNNING)

    async def until(self, state: InstanceState, detail: str | None = None) -> StateChanged:
        """The next `StateChanged` to ``state`` whose detail starts with ``detail``."""
        while True:
            event = await self.events.receive()
            self.seen.append(event)
            if not isinstance(event, StateChanged) or event.new is not state:
                continue
            if detail is None or (event.detail or "").startswith(detail):
                return event

    def changes(self) -> list[tuple[InstanceState, str | None]]:
        """Every state change seen so far (events still queued are read first)."""
        while True:
            try:
                self.seen.append(self.events.receive_nowait())
            except trio.WouldBlock:
                break
        return [(e.new, e.detail) for e in self.seen if isinstance(e, StateChanged)]


def ollama_config(
    registry: Path, data_root: Path, keep_alive: str | int = "30m", probe_timeout_s: float = 2.0
) -> InferConfig:
    managed = ManagedConfig(registry=registry, data_root=data_root, keep_alive=keep_alive)
    return InferConfig.managing(InferFlavor.OLLAMA, managed, probe_timeout_s=probe_timeout_s)


async def plan_for(
    line: Line, config: InferConfig, *, tag: str = TAG, load_budget_s: float | None = None
) -> Plan:
    registry = ModelRegistry.in_memory()
    registry.add_ollama(NAME, tag)
    spec = InferenceSpec(role="chat", runtime=InferFlavor.OLLAMA, model=NAME)
    plan = await make_plan(
        spec,
        config,
        registry=registry,
        edges=Edges(open_prober=http_prober_factory(line.transport())),
        instance_dir=Path("unused"),
    )
    supervision = resolve_supervision(Supervision(readiness_timeout_s=load_budget_s), config)
    return attrs.evolve(plan, supervision=supervision)


@asynccontextmanager
async def rig(
    fake: FakeOllama,
    *,
    keep_alive: str | int = "30m",
    load_budget_s: float | None = None,
    watch_s: float = WATCH_INTERVAL_S,
    line: Line | None = None,
    tag: str = TAG,
    on_probe: Callable[[ProbeTimed], None] = ignore_probe,
) -> AsyncIterator[Rig]:
    """The actor for ``tiny-model`` (Ollama name ``tag``, ``tiny:latest`` by default),
    planned through `make_plan`, talking to ``fake`` through ``line`` (a plain `Line`); its
    calendar clock is the fake's (so ``expires_at`` reads as the fake means it)."""
    line = line or Line(fake)
    config = ollama_config(Path("unused.json"), Path("unused"), keep_alive)
    plan = await plan_for(line, config, tag=tag, load_budget_s=load_budget_s)
    supervisor = Supervisor.create()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.serve)
        events = await call(supervisor.inbox, partial(Subscribe, 1024))
        actor = OllamaActor.create(
            instance_id="chat-0123abcd-test",
            runtime_id="infer.ollama",
            plan=plan,
            config=config,
            instance_dir=None,
            events=supervisor.events,
            open_ollama=line.open,
            watch_interval_s=watch_s,
            on_probe=on_probe,
            wall_clock=lambda: fake.wall(trio.current_time()),
        )
        await call(supervisor.inbox, partial(Load, actor))
        yield Rig(line, supervisor.inbox, actor, events)
        nursery.cancel_scope.cancel()


def slow(fake: FakeOllama, **faults: object) -> None:
    fake.config = attrs.evolve(fake.config, **faults)  # type: ignore[arg-type]


def spec_at(port: int, model: str | None = NAME) -> InferenceSpec:
    return InferenceSpec(
        role="chat", runtime=InferFlavor.OLLAMA, model=model, serve=ServeArgs(port=port)
    )
