"""Ollama driven through the runtime: planning, the managed Ollama actor, adopted Ollama and
Ollama's capabilities (issue 4 items 2 to 4; seed-behaviour.md sections 4, 5 and 7;
checklist 63 to 71; FC-18 to FC-21).

Timing tests run the Ollama actor under its real supervisor with trio's
``MockClock(autojump_threshold=0)``, talking to the fake Ollama through
``FakeOllama.transport`` (no socket), so loads of minutes and lingering unloads take no
real time. The rest go through `open_runtime` to a fake Ollama on a real loopback socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

import attrs
import httpx
import pytest
import trio
import trio.testing

from inferactors import (
    AdmissionRefused,
    BackendError,
    Capability,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InstanceStatus,
    InvalidState,
    ManagedConfig,
    ModelFormat,
    ModelRegistry,
    ModelSource,
    ResolvedModel,
    RestartScheduled,
    RunEvidence,
    ServeArgs,
    StateChanged,
    Supervision,
    UnknownInstance,
    Unsupported,
    Up,
    open_runtime,
)
from inferactors._actors.admission import make_plan
from inferactors._actors.messages import (
    DeepHealth,
    GetHealth,
    GetStatus,
    Load,
    ReplyTo,
    Restart,
    Route,
    Start,
    Stop,
    Subscribe,
    Unload,
    call,
)
from inferactors._actors.ollama_actor import OllamaActor
from inferactors._actors.ollama_book import ollama_tag_of
from inferactors._actors.supervisor import Supervisor
from inferactors._config.config import ControlMode
from inferactors._edges.bundle import http_prober_factory
from inferactors._edges.ollama_client import OllamaApi, OllamaClient
from inferactors._events import Event
from inferactors._policy.admission import Plan, resolve_supervision
from inferactors._policy.probe_parse import CompletionResult, ServerReport
from inferactors.testing._fake_ollama import (
    FakeOllama,
    FakeRequest,
    open_fake_ollama,
    serve_fake_ollama,
)
from inferactors.testing._fake_ollama_api import FakeOllamaConfig

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
        open_prober=http_prober_factory(line.transport()),
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
    watch_s: float = 2.0,
) -> AsyncIterator[Rig]:
    """The actor for ``tiny-model`` (tag ``tiny:latest``), planned through `make_plan`."""
    line = Line(fake)
    config = ollama_config(Path("unused.json"), Path("unused"), keep_alive)
    plan = await plan_for(line, config, load_budget_s=load_budget_s)
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
        )
        await call(supervisor.inbox, partial(Load, actor))
        yield Rig(line, supervisor.inbox, actor, events)
        nursery.cancel_scope.cancel()


@pytest.fixture
async def fake(autojump_clock: trio.testing.MockClock) -> FakeOllama:
    """A fake with ``tiny`` pulled and ``other:7b`` loaded by someone else. Tests using it
    name ``autojump_clock`` too: pytest-trio takes the clock only from a test's arguments."""
    return FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("other:7b",)))


def slow(fake: FakeOllama, **faults: object) -> None:
    fake.config = attrs.evolve(fake.config, **faults)  # type: ignore[arg-type]


# --- the whole lifecycle -----------------------------------------------------------------------


async def test_a_full_lifecycle_sends_exactly_these_requests(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Plan, load, start, loading, running, a periodic ownership check, deep health, stop,
    unload: the exact sequence the daemon receives, only allowed paths, never a DELETE."""
    slow(fake, load_delay_s=30.0)
    async with rig(fake, keep_alive=-1) as r:
        assert (await r.status()).state is InstanceState.LOADED
        await r.start()
        await trio.sleep(1.0)  # the load is in flight (it takes 30 s)
        assert await r.status() == InstanceStatus(InstanceState.DEGRADED, "loading model")
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await trio.sleep(2.5)  # one ownership check of /api/ps
        assert await r.status() == InstanceStatus(InstanceState.RUNNING, "model resident")
        assert (await r.deep_health()).text == "Hello"
        evidence = await r.stop()
        assert evidence == RunEvidence.empty(
            runtime="infer.ollama", instance_id=r.actor.instance_id
        )
        assert fake.resident() == ("other:7b",)
        await r.unload()
        assert r.changes() == [
            (InstanceState.LOADED, "model not resident"),
            (InstanceState.DEGRADED, "loading model"),
            (InstanceState.RUNNING, "model resident"),
            (InstanceState.DEGRADED, "unloading model tiny:latest"),
            (InstanceState.LOADED, "stopped on request; model unloaded"),
        ]
    assert requests(fake) == [
        *SURVEY,  # planning: GETs only
        *SURVEY,  # status: Loaded
        PS,  # start: is the model already resident? (no)
        ("POST", "/api/generate", load_body(-1)),  # the load, open for the whole 30 s
        *SURVEY,  # status while the load is in flight
        PS,  # the load is confirmed in /api/ps (FC-18)
        PS,  # the periodic ownership check (FC-20)
        *SURVEY,  # status: Running
        PS,  # deep health: only while resident
        (
            "POST",
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1,
                "stream": False,
                "model": TAG,  # the tag, not the registry name
            },
        ),
        ("POST", "/api/generate", UNLOAD),  # the one unload
        PS,  # gone (FC-21)
    ]
    assert_allowed(fake)


# --- planning (checklist 63, 64) ---------------------------------------------------------------


@pytest.fixture
def registry_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.json"
    ModelRegistry.open(path).add_ollama(NAME, TAG)
    return path


def spec_at(port: int, model: str | None = NAME) -> InferenceSpec:
    return InferenceSpec(
        role="chat", runtime=InferFlavor.OLLAMA, model=model, serve=ServeArgs(port=port)
    )


async def test_checklist_63_admit_refuses_a_silent_daemon_and_an_unpulled_tag_with_gets_only(
    tmp_path: Path, registry_file: Path, free_port: int
) -> None:
    config = ollama_config(registry_file, tmp_path / "state")
    async with open_runtime(config) as runtime:
        with pytest.raises(AdmissionRefused) as silent:
            await runtime.admit(spec_at(free_port))
        assert str(silent.value) == (
            f"ollama is not answering at http://127.0.0.1:{free_port}; "
            "inferactors drives it but does not start it"
        )
        async with open_fake_ollama(models=("tiny:q4", "tinyllama")) as fake:
            with pytest.raises(AdmissionRefused) as unpulled:
                await runtime.load(spec_at(fake.port))
            assert str(unpulled.value) == (
                "ollama has no model tiny:latest: pull it first (inferactors never downloads)"
            )  # tiny:q4 and tinyllama:latest are other models
            assert await runtime.instances() == ()
        assert {r.method for r in fake.requests} == {"GET"}
        assert_allowed(fake)
        async with open_fake_ollama(models=("tiny",)) as pulled:
            admission = await runtime.admit(spec_at(pulled.port))
        assert admission.runtime == "infer.ollama"
        assert admission.notes[0] == f"endpoint http://127.0.0.1:{pulled.port}"
        assert "model tiny-model is ollama tag tiny:latest, pulled" in admission.notes
        assert {r.method for r in pulled.requests} == {"GET"}


async def test_checklist_63_a_model_that_is_not_an_ollama_model_is_refused(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    registry = tmp_path / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="gguf-model")
    async with (
        open_fake_ollama(models=("tiny",)) as fake,
        open_runtime(ollama_config(registry, tmp_path / "state")) as runtime,
    ):
        with pytest.raises(AdmissionRefused, match="cannot load a gguf model"):
            await runtime.admit(spec_at(fake.port, "gguf-model"))
        with pytest.raises(AdmissionRefused, match="model nope"):
            await runtime.admit(spec_at(fake.port, "nope"))
    assert fake.requests == []  # refused before any request


async def test_checklist_64_the_tag_is_the_manifests_ollama_tag(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        assert r.actor.tag == TAG
        assert r.actor.plan.model is not None
        assert r.actor.plan.model.name == NAME
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        assert TAG in fake.resident()
    assert [r.json for r in loads(fake)] == [load_body("30m")]


def test_checklist_64_without_a_tag_the_model_name_is_used() -> None:
    spec = InferenceSpec(role="chat", runtime=InferFlavor.OLLAMA, model="llama3.2")
    model = ResolvedModel(name="llama3.2", format=ModelFormat.OLLAMA, root=Path(), shards=())
    plan = Plan(spec=spec, mode=ControlMode.MANAGED, notes=(), model=model)
    assert ollama_tag_of(plan) == "llama3.2"
    tagged = attrs.evolve(model, source=ModelSource(ollama_tag="llama3.2:3b"))
    assert ollama_tag_of(attrs.evolve(plan, model=tagged)) == "llama3.2:3b"
    assert ollama_tag_of(attrs.evolve(plan, model=None)) == "llama3.2"


# --- status, keep_alive, ownership (checklist 65 to 69) ------------------------------------------


async def test_checklist_65_status_runs_loaded_loading_running_and_a_failed_load_is_degraded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=10.0)
    async with rig(fake) as r:
        assert await r.status() == InstanceStatus(InstanceState.LOADED, "model not resident")
        await r.start()
        assert (await r.status()).detail == "loading model"
        with trio.fail_after(60):
            running = await r.until(InstanceState.RUNNING)
        assert (running.old, running.detail) == (InstanceState.DEGRADED, "model resident")
        await r.stop()
        slow(fake, load_error="llama runner process has terminated: exit status 2")
        await r.start()
        with trio.fail_after(60):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail == (
            'load failed: ollama load returned HTTP 500: {"error": "llama runner process has '
            'terminated: exit status 2"}'
        )
        assert (await r.status()).detail == failed.detail


@pytest.mark.parametrize(("keep_alive", "sent"), [("30m", "30m"), (-1, -1), (3600, 3600)])
async def test_checklist_66_keep_alive_is_sent_as_configured(
    autojump_clock: trio.testing.MockClock,
    fake: FakeOllama,
    keep_alive: str | int,
    sent: str | int,
) -> None:
    async with rig(fake, keep_alive=keep_alive) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
    assert [request.json for request in loads(fake)] == [load_body(sent)]
    assert type(load_body(sent)["keep_alive"]) is type(sent)


async def test_checklist_67_a_pre_resident_model_is_never_loaded_nor_unloaded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=(), preloaded=("tiny",)))
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            running = await r.until(InstanceState.RUNNING)
        assert running.detail == (
            "model resident (loaded by someone else; inferactors never unloads it)"
        )
        assert (await r.deep_health()).text == "Hello"
        assert await r.stop() == RunEvidence.empty(
            runtime="infer.ollama", instance_id=r.actor.instance_id
        )
        status = await r.status()
        assert (status.state, status.detail) == (
            InstanceState.LOADED,
            "stopped; the model stays resident (loaded by someone else)",
        )
        await r.start()
        await r.unload()
    assert [r for r in fake.requests if r.path == "/api/generate"] == []
    assert fake.resident() == (TAG,)
    assert_allowed(fake)


async def test_checklist_68_exactly_one_unload_at_stop(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await r.stop()
        with pytest.raises(InvalidState, match="is not running"):
            await r.stop()
        await r.unload()
    assert len(unloads(fake)) == 1
    assert TAG not in fake.resident()


async def test_checklist_68_exactly_one_unload_at_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await r.unload()
        with pytest.raises(UnknownInstance):
            await r.status()
    assert len(unloads(fake)) == 1
    assert fake.resident() == ("other:7b",)


async def test_an_aborted_load_is_still_unloaded_exactly_once_at_stop(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=600.0)
    async with rig(fake) as r:
        await r.start()
        await trio.sleep(10.0)
        assert len(loads(fake)) == 1  # in flight
        await r.stop()
        assert await r.status() == InstanceStatus(
            InstanceState.LOADED, "stopped on request; model unloaded"
        )
        await r.unload()
    assert len(unloads(fake)) == 1
    assert TAG not in fake.resident()  # the daemon aborted the load when we hung up
    sent = requests(fake)
    assert sent.index(("POST", "/api/generate", UNLOAD)) > sent.index(
        ("POST", "/api/generate", load_body("30m"))
    )


async def test_a_stop_before_the_load_was_sent_owes_no_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        r.line.ps_delay_s = 1.0
        await r.start()
        await r.stop()  # the /api/ps check has not answered yet: no load was asked for
        await trio.sleep(5.0)
        await r.unload()
    assert loads(fake) == []
    assert unloads(fake) == []


async def test_checklist_69_a_second_start_while_loading_is_refused(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=60.0)
    async with rig(fake) as r:
        await r.start()
        with pytest.raises(InvalidState, match="is already loading"):
            await r.start()
        await trio.sleep(1.0)
        with pytest.raises(InvalidState, match="is already loading"):
            await r.start()
        with trio.fail_after(120):
            await r.until(InstanceState.RUNNING)
        with pytest.raises(InvalidState, match="is already running"):
            await r.start()
    assert len(loads(fake)) == 1


async def test_checklist_70_the_daemon_is_never_restarted_and_restart_is_refused(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """Ollama has no process of ours: a daemon gone is reported (Exited), never restarted."""
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        with pytest.raises(InvalidState, match="never restarted"):
            await r.route(partial(Restart, 1))
        r.line.down = True
        status = await r.status()
        assert status.state is InstanceState.EXITED
        assert status.detail is not None
        assert status.detail.startswith("unreachable (GET /api/version:")
        await trio.sleep(120.0)
        r.line.down = False
        assert (await r.status()).detail == "model resident"
        assert not any(isinstance(e, RestartScheduled) for e in r.seen)
        r.changes()
        assert not any(isinstance(e, RestartScheduled) for e in r.seen)
    assert_allowed(fake)


# --- deep health and served model (checklist 62, 71) ----------------------------------------------


async def test_deep_health_asks_by_tag_and_never_for_a_model_that_is_not_resident(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        with pytest.raises(BackendError, match="is not resident"):
            await r.deep_health()
        assert [q for q in fake.requests if q.path == "/v1/chat/completions"] == []
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        result = await r.deep_health()
        assert (result.text, result.finish_reason) == ("Hello", "length")
        report = await r.health()
        assert isinstance(report.health, Up)
        assert report.lists(TAG)
        assert report.resident(TAG)
        assert report.version == "0.5.1"
    (asked,) = [q for q in fake.requests if q.path == "/v1/chat/completions"]
    assert isinstance(asked.json, dict)
    assert asked.json["model"] == TAG
    assert "keep_alive" not in asked.json


async def test_checklist_71_served_model_is_the_tag_through_the_runtime(
    tmp_path: Path, registry_file: Path
) -> None:
    async with (
        open_fake_ollama(models=("tiny",)) as fake,
        open_runtime(ollama_config(registry_file, tmp_path / "state")) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        assert (await runtime.spec_of(handle)).model == NAME
        assert await runtime.served_model(handle) == TAG


# --- the field cases ---------------------------------------------------------------------------


async def test_fc18_the_load_request_stays_open_for_the_whole_load(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """The fake aborts a load whose client hangs up; a 2-minute load against 2 s probe
    timeouts still ends resident, confirmed in /api/ps."""
    slow(fake, load_delay_s=120.0)
    async with rig(fake) as r:
        started = trio.current_time()
        await r.start()
        with trio.fail_after(600):
            await r.until(InstanceState.RUNNING, "model resident")
        assert trio.current_time() - started == pytest.approx(120.0, abs=0.5)
        assert TAG in fake.resident()
    assert len(loads(fake)) == 1


async def test_fc18_a_load_past_its_budget_is_a_load_timeout_and_is_unloaded_once(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=600.0)
    async with rig(fake, load_budget_s=60.0) as r:
        await r.start()
        with trio.fail_after(600):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail == (
            "load failed: load timeout: ollama load of tiny:latest did not finish within 60 s"
        )
        assert TAG not in fake.resident()  # our hang-up aborted it
        await r.stop()
    assert len(loads(fake)) == 1
    assert len(unloads(fake)) == 1  # we asked for that load


async def test_fc18_over_a_real_socket_a_load_longer_than_the_probe_timeout_completes(
    tmp_path: Path, registry_file: Path
) -> None:
    config = ollama_config(registry_file, tmp_path / "state", probe_timeout_s=0.3)
    async with (
        open_fake_ollama(models=("tiny",), load_delay_s=1.5) as fake,
        open_runtime(config) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert status.detail == "model resident"
        assert fake.resident() == (TAG,)
    assert len(loads(fake)) == 1
    assert len(unloads(fake)) == 1  # leaving open_runtime stops it


async def test_fc19_a_runner_timeout_is_a_load_timeout_and_is_not_retried(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=300.0, load_error=RUNNER_TIMEOUT)
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(600):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail is not None
        assert failed.detail.startswith("load failed: load timeout: ollama load returned HTTP 500")
        assert RUNNER_TIMEOUT in failed.detail
        report = await r.health()
        assert isinstance(report.health, Up)  # the daemon is fine
        for _ in range(5):
            await trio.sleep(120.0)
            assert (await r.status()).detail == failed.detail
        assert len(loads(fake)) == 1  # no blind retry
        await r.stop()
    assert len(unloads(fake)) == 1


async def test_fc20_a_foreign_keep_alive_is_reported_as_ownership_lost_never_re_pinned(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake, keep_alive=-1) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await trio.sleep(30.0)
        await r.deep_health()  # our own request moves expires_at: not a foreign change
        await trio.sleep(10.0)
        assert (await r.status()).detail == "model resident"
        async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as other:
            body = {"model": "tiny", "prompt": "hi", "stream": False, "keep_alive": "5m"}
            assert (await other.post("/api/generate", json=body)).status_code == 200
        with trio.fail_after(10):
            lost = await r.until(InstanceState.DEGRADED, "ownership lost")
        assert lost.detail is not None
        assert "another client changed the keep_alive of tiny:latest" in lost.detail
        assert "inferactors does not re-pin it" in lost.detail
        assert (await r.status()).detail == lost.detail
        await trio.sleep(60.0)
        assert len(loads(fake)) == 1  # never re-pinned
        await r.stop()
    assert len(unloads(fake)) == 1


async def test_fc20_a_model_unloaded_by_someone_else_is_reported_not_reloaded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        async with httpx.AsyncClient(base_url="http://x", transport=fake.transport()) as other:
            await other.post("/api/generate", json={"model": "tiny", "keep_alive": 0})
        with trio.fail_after(10):
            gone = await r.until(InstanceState.DEGRADED)
        assert gone.detail == (
            "model tiny:latest is no longer resident (it was loaded by us); "
            "inferactors does not reload it"
        )
        await trio.sleep(60.0)
        assert len(loads(fake)) == 1


async def test_fc21_stop_polls_ps_until_a_lingering_model_is_gone(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, unload_linger_s=3.0)
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        fake.requests.clear()
        began = trio.current_time()
        await r.stop(grace_s=10.0)
        assert 2.9 <= trio.current_time() - began <= 3.2
        assert TAG not in fake.resident()
        assert (await r.status()).detail == "stopped on request; model unloaded"
    sent = requests(fake)
    assert sent[0] == ("POST", "/api/generate", UNLOAD)
    assert set(sent[1:-3]) == {PS}  # then only /api/ps until it is gone
    assert len(unloads(fake)) == 1


async def test_fc21_a_model_lingering_past_the_deadline_is_reported_not_unloaded_again(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, unload_linger_s=30.0)
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        began = trio.current_time()
        await r.stop(grace_s=2.0)
        assert trio.current_time() - began == pytest.approx(2.0, abs=0.2)
        lingering = await r.status()
        assert lingering == InstanceStatus(
            InstanceState.DEGRADED,
            "model tiny:latest still resident 2 s after our unload; "
            "inferactors does not send it again",
        )
        await trio.sleep(40.0)
        assert await r.status() == InstanceStatus(
            InstanceState.LOADED, "stopped on request; model unloaded"
        )
    assert len(unloads(fake)) == 1


async def test_fc21_a_start_during_our_lingering_unload_waits_for_it_then_loads_afresh(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """A model still in /api/ps because of our own unload is not "someone else's"."""
    slow(fake, unload_linger_s=5.0)
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
        await r.stop(grace_s=1.0)
        assert (await r.status()).detail is not None
        await r.start()
        with trio.fail_after(60):
            again = await r.until(InstanceState.RUNNING)
        assert again.detail == "model resident"  # ours, so it is unloaded at stop
        await r.stop()
    assert len(loads(fake)) == 2
    assert len(unloads(fake)) == 2
    assert TAG not in fake.resident()


async def test_an_unload_owed_is_sent_when_the_actor_is_torn_down(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake, keep_alive=-1) as r:
        await r.start()
        with trio.fail_after(60):
            await r.until(InstanceState.RUNNING)
    assert len(unloads(fake)) == 1  # cancelled without a stop: the pin is not left behind
    assert TAG not in fake.resident()


async def test_an_unreachable_daemon_and_an_unpulled_tag_are_reported(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    async with rig(fake) as r:
        r.line.down = True
        status = await r.status()
        assert status.state is InstanceState.EXITED
        assert status.detail is not None
        assert status.detail.startswith("unreachable (GET /api/version:")
        await r.start()  # the /api/ps check fails: nothing is loaded blind
        await trio.sleep(1.0)
        r.line.down = False
        status = await r.status()
        assert status.state is InstanceState.DEGRADED
        assert status.detail is not None
        assert status.detail.startswith("load failed: cannot tell whether tiny:latest is resident")
        await r.stop()
        del fake.book.pulled[TAG]
        assert (await r.status()).detail == "model tiny:latest is not pulled"
    assert loads(fake) == []
    assert unloads(fake) == []


# --- through the runtime, on a real socket --------------------------------------------------------


async def test_managed_ollama_through_the_runtime(tmp_path: Path, registry_file: Path) -> None:
    """As root too, with no run_as: inferactors runs no process for Ollama."""
    data_root = tmp_path / "state"
    config = ollama_config(registry_file, data_root, keep_alive=-1)
    async with (
        open_fake_ollama(models=("tiny",), unload_linger_s=0.2) as fake,
        open_runtime(config) as rt,
    ):
        events = await rt.subscribe()
        handle = await rt.load(spec_at(fake.port))
        assert (await rt.status(handle)).state is InstanceState.LOADED
        await rt.start(handle)
        with trio.fail_after(30):
            await rt.wait_state(handle, InstanceState.RUNNING)
        assert (await rt.deep_health(handle)).text == "Hello"
        evidence = await rt.stop(handle)
        assert (evidence.runtime, evidence.instance_id, evidence.pid) == (
            "infer.ollama",
            handle.instance_id,
            0,
        )
        assert fake.resident() == ()
        await rt.unload(handle)
        assert (await rt.status(handle)).state is InstanceState.UNKNOWN
        assert not (data_root / handle.instance_id).exists()
        stopped = (InstanceState.LOADED, "stopped on request; model unloaded")
        changes: list[tuple[InstanceState, str | None]] = []
        with trio.fail_after(10):
            while changes[-1:] != [stopped]:
                event = await events.receive()
                if isinstance(event, StateChanged):
                    changes.append((event.new, event.detail))
    assert changes[:3] == [
        (InstanceState.LOADED, "model not resident"),
        (InstanceState.DEGRADED, "loading model"),
        (InstanceState.RUNNING, "model resident"),
    ]
    assert [r.json for r in loads(fake)] == [load_body(-1)]
    assert len(unloads(fake)) == 1
    assert_allowed(fake)


# --- adopted Ollama (issue 4 item 3) --------------------------------------------------------------


async def test_adopted_ollama_is_only_probed_and_mapped_as_ollama() -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with (
        open_fake_ollama(models=("tiny", "spare"), preloaded=("tiny",)) as fake,
        open_runtime(config) as runtime,
    ):
        resident = await runtime.load(spec_at(fake.port, "tiny"))
        idle = await runtime.load(
            InferenceSpec(
                role="spare",
                runtime=InferFlavor.OLLAMA,
                model="spare",
                serve=ServeArgs(port=fake.port),
            )
        )
        missing = await runtime.load(
            InferenceSpec(
                role="missing",
                runtime=InferFlavor.OLLAMA,
                model="gone",
                serve=ServeArgs(port=fake.port),
            )
        )
        for handle in (resident, idle, missing):
            await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(resident, InstanceState.RUNNING)
        assert status.detail == "model resident"
        assert (await runtime.status(idle)).detail == "server up; model not resident"
        assert await runtime.status(missing) == InstanceStatus(
            InstanceState.DEGRADED, "model gone is not pulled", last_probe="up"
        )
        with pytest.raises(Unsupported, match="never stops it"):
            await runtime.stop(resident)
        await runtime.unload(resident)
        assert fake.resident() == (TAG,)  # untouched
        assert await runtime.served_model(idle) == "spare"
    assert {r.method for r in fake.requests} == {"GET"}  # checklist 20


async def test_adopted_ollama_gone_is_exited_and_re_adopted_once_back(
    free_port: int,
) -> None:
    config = InferConfig.adopted(InferFlavor.OLLAMA)
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("tiny",)))
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        serving = trio.CancelScope()

        async def serve(*, task_status: trio.TaskStatus[object]) -> None:
            with serving:
                await serve_fake_ollama(fake, free_port, task_status=task_status)

        await nursery.start(serve)
        handle = await runtime.load(spec_at(free_port, "tiny"))
        await runtime.start(handle)
        with trio.fail_after(30):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        serving.cancel()
        with trio.fail_after(30):
            gone = await runtime.wait_state(handle, InstanceState.EXITED)
        assert gone.detail is not None
        assert gone.detail.endswith("inferactors does not restart adopted servers")
        await nursery.start(serve_fake_ollama, fake, free_port)
        with trio.fail_after(30):
            back = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert back.detail == "model resident"
        assert runtime.network_exposure.value == "lan"
        nursery.cancel_scope.cancel()
    assert {r.method for r in fake.requests} == {"GET"}


# --- capabilities (issue 4 item 4) ----------------------------------------------------------------

OLLAMA_CAPABILITIES = (
    ("runtime.infer.ollama", ("ollama", "gguf"), "0.5.1"),
    ("format.ollama", (), None),
    ("format.gguf", (), None),
)


def summary(found: tuple[Capability, ...]) -> tuple[tuple[str, tuple[str, ...], str | None], ...]:
    return tuple((c.name, c.formats, c.version) for c in found)


async def test_ollama_capabilities_need_a_probe_and_an_answering_daemon(
    tmp_path: Path, registry_file: Path, free_port: int
) -> None:
    async with open_fake_ollama(models=("tiny",)) as fake:
        for config in (
            InferConfig.adopted(InferFlavor.OLLAMA, probe_port=fake.port),
            attrs.evolve(ollama_config(registry_file, tmp_path / "state"), probe_port=fake.port),
        ):
            async with open_runtime(config) as runtime:
                assert runtime.provides() == ()
                found = await runtime.probe_capabilities()
                assert summary(found) == OLLAMA_CAPABILITIES
                assert found[0].mode == config.mode.value
                assert runtime.provides() == found
    assert {r.method for r in fake.requests} == {"GET"}
    dead = InferConfig.adopted(InferFlavor.OLLAMA, probe_port=free_port)
    async with open_runtime(dead) as runtime:
        assert await runtime.probe_capabilities() == ()


async def test_ollama_capabilities_a_500_claims_nothing_a_503_claims_the_runtime() -> None:
    def answering(status: int) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            return httpx.Response(status, json={"version": "0.5.1"})

        return httpx.MockTransport(handle)

    config = InferConfig.adopted(InferFlavor.OLLAMA)
    async with open_runtime(config, open_prober=http_prober_factory(answering(500))) as rt:
        assert await rt.probe_capabilities() == ()
    async with open_runtime(config, open_prober=http_prober_factory(answering(503))) as rt:
        found = await rt.probe_capabilities()
    assert [c.name for c in found] == ["runtime.infer.ollama", "format.ollama", "format.gguf"]
