"""The real mlx_lm.server through the runtime (issue 4, items 1 and 3; FC-07, FC-09).

Managed: inferactors launches mlx_lm.server (as ``nobody`` when the suite runs as root,
through a ``sh`` wrapper that user can execute), sees it reach Running only after one real
token, gets one more from deep health, and stops it leaving nothing behind; its environment
is offline with a private Hugging Face cache whatever the config says. Three ways to be
unwell: a chat template that always raises (``/health`` 200, model listed, every completion
refused), a generation thread dead at start, and one killed after the server was ready by a
malformed request from a foreign client (then the runtime kills it and the restart policy
starts it again). Adopted: the test starts mlx_lm.server itself, a recording proxy sits in
front, and inferactors only sends GETs until deep health is asked for, never signals it,
and unload only forgets it.

Each managed test passes ``--log-level DEBUG`` so the server logs every request body it
receives ("Incoming Request Body: {...}"): that is how these tests see what the server got.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import stat
import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import pytest
import trio

from inferactors import BackendError, InferFlavor, ModelFormat, Unsupported
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._actors.serving import open_runtime
from inferactors._config.config import InferConfig, ManagedConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._config.supervision import RestartPolicy, Supervision
from inferactors._edges.probe import ProbeClient
from inferactors._events import Event, ProcessExited, ProcessStarted, RestartScheduled, StateChanged
from inferactors._models.registry import ModelRegistry
from inferactors._status import InstanceState
from inferactors._stop_reasons import StopReason
from inferactors.testing import open_recording_proxy, write_python_program
from inferactors.testing._tiny_mlx import TINY_WORDS
from mlx_support import broken_copy, is_up, mlx_server, readable_tiny_mlx, wait_report
from proc_checks import group_alive
from support import Unprivileged

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" and find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed on this platform (the dev extra installs it on Linux)",
)

READY_S = 60.0
"""Generous deadline for a server to come up (about 1.5 s as nobody on 2 idle cores)."""

DEBUG = ("--log-level", "DEBUG")
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def tiny_mlx(unprivileged: Unprivileged) -> Path:
    """The tiny model where ``nobody`` can read it, in a directory named ``tiny-mlx``."""
    return readable_tiny_mlx(unprivileged.directory("models") / "tiny-mlx")


@pytest.fixture(scope="module")
def mlx_program(unprivileged: Unprivileged) -> Path:
    """mlx_lm.server as a ``sh`` wrapper the run_as user can execute."""
    return write_python_program(
        unprivileged.directory("programs") / "mlx_lm.server",
        entry="mlx_lm.server:main",
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )


def managed_config(
    server_dir: Path,
    program: Path,
    model: Path,
    run_as: str | None,
    *,
    name: str = "tiny",
    env: tuple[tuple[str, str], ...] = (),
) -> InferConfig:
    registry = server_dir / "models.json"
    ModelRegistry.open(registry).add(model, name=name, format=ModelFormat.MLX)
    managed = ManagedConfig(
        registry=registry,
        data_root=server_dir / "state",
        serve_program=program,
        env=env,
        run_as=run_as,
    )
    return InferConfig.managing(InferFlavor.MLX_LM, managed)


def mlx_spec(name: str, port: int) -> InferenceSpec:
    serve = ServeArgs(port=port, extra_args=DEBUG)
    return InferenceSpec(role="chat", runtime=InferFlavor.MLX_LM, model=name, serve=serve)


async def events_until(
    events: trio.MemoryReceiveChannel[Event], done: Callable[[Event], bool]
) -> list[Event]:
    """Every event up to and including the first that is ``done``."""
    seen: list[Event] = []
    with trio.fail_after(READY_S):
        async for event in events:
            seen.append(event)
            if done(event):
                return seen
    raise AssertionError(f"the event stream ended; seen {seen}")


def becomes(state: InstanceState) -> Callable[[Event], bool]:
    return lambda event: isinstance(event, StateChanged) and event.new is state


def detail_has(words: str) -> Callable[[Event], bool]:
    return lambda event: isinstance(event, StateChanged) and words in (event.detail or "")


def states(seen: list[Event]) -> list[InstanceState]:
    return [event.new for event in seen if isinstance(event, StateChanged)]


def started(seen: list[Event]) -> list[int]:
    return [event.pid for event in seen if isinstance(event, ProcessStarted)]


def server_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (entry.decode().split("=", 1) for entry in raw if entry)
    return {name: value for name, value in pairs}


def received_bodies(stderr: bytes) -> list[dict[str, object]]:
    """The request bodies mlx_lm.server logged at DEBUG level, in order."""
    text, marker = stderr.decode(errors="replace"), "Incoming Request Body: "
    decoder, bodies = json.JSONDecoder(), []
    start = text.find(marker)
    while start >= 0:
        body, end = decoder.raw_decode(text, start + len(marker))
        bodies.append(body)
        start = text.find(marker, end)
    return bodies


def assert_offline_and_private(pid: int, instance_dir: Path, run_as: str | None) -> None:
    """The server runs with HF_HUB_OFFLINE=1 and its own existing, private HF_HUB_CACHE."""
    environment = server_environment(pid)
    assert environment["HF_HUB_OFFLINE"] == "1"
    cache = Path(environment["HF_HUB_CACHE"])
    assert cache == instance_dir / "hf-cache"
    info = cache.stat()
    assert stat.S_ISDIR(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o700
    owner = os.geteuid() if run_as is None else pwd.getpwnam(run_as).pw_uid
    assert info.st_uid == owner


async def start_and_run(
    runtime: InferRuntime,
    spec: InferenceSpec,
    supervision: Supervision | None = None,
    events: trio.MemoryReceiveChannel[Event] | None = None,
) -> tuple[InstanceHandle, list[Event]]:
    """Load and start ``spec``; the events (from ``events``, else a fresh subscription) up
    to its first Running."""
    mine = events is None
    events = await runtime.subscribe() if events is None else events
    handle = await runtime.load(spec, supervision)
    await runtime.start(handle)
    seen = await events_until(events, becomes(InstanceState.RUNNING))
    if mine:
        await events.aclose()
    return handle, seen


# Managed.


async def test_managed_mlx_runs_after_one_token_answers_deep_health_and_stops_clean(
    server_dir: Path, mlx_program: Path, tiny_mlx: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """Nothing in the config sets HF_HUB_*: the launch makes the server offline with a
    private cache anyway (issue 4 item 1). Running takes exactly one real token, and no
    request names a model (FC-09)."""
    run_as = unprivileged.run_as
    config = managed_config(server_dir, mlx_program, tiny_mlx, run_as)
    async with open_runtime(config, node_id="test") as runtime:
        handle, seen = await start_and_run(runtime, mlx_spec("tiny", free_port))
        (pid,) = started(seen)
        instance_dir = server_dir / "state" / handle.instance_id
        assert_offline_and_private(pid, instance_dir, run_as)
        status = runtime.status(handle)
        assert (status.state, status.pid, status.last_probe) == (InstanceState.RUNNING, pid, "up")

        result = await runtime.deep_health(handle)
        assert result.text.strip() in TINY_WORDS
        assert result.finish_reason == "length"

        evidence = await runtime.stop(handle, 5.0)
        stopped = runtime.status(handle)
    port = str(free_port)  # the verified root directory's descriptor is served
    assert evidence.args[0] == "--model"
    assert evidence.args[1].startswith("/proc/self/fd/")
    assert evidence.args[2:] == ("--host", "127.0.0.1", "--port", port, *DEBUG)
    assert (evidence.exit_code, evidence.signal) == (None, signal.SIGTERM)
    assert not evidence.killed_after_grace
    assert not group_alive(pid)
    assert (stopped.state, stopped.stop_reason) == (InstanceState.EXITED, "requested")
    bodies = received_bodies(evidence.stderr)
    assert len(bodies) == 2, "one first token for readiness, one for deep health"
    for body in bodies:
        assert "model" not in body, body
        assert body["max_tokens"] == 1
    assert evidence.stderr.count(b'"POST /v1/chat/completions HTTP/1.1" 200') == 2


async def test_the_config_cannot_put_a_managed_mlx_server_online(
    server_dir: Path, mlx_program: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """Config env that asks for the Hub and a shared cache is overridden; and the model is
    found by the ``--model`` path mlx_lm.server lists, not by a lucky directory name."""
    run_as = unprivileged.run_as
    weights = readable_tiny_mlx(unprivileged.directory("weights") / "weights")
    shared = server_dir / "shared-cache"
    hostile = (("HF_HUB_OFFLINE", "0"), ("HF_HUB_CACHE", str(shared)))
    config = managed_config(server_dir, mlx_program, weights, run_as, name="chat", env=hostile)
    async with open_runtime(config, node_id="test") as runtime:
        handle, seen = await start_and_run(runtime, mlx_spec("chat", free_port))
        (pid,) = started(seen)
        assert_offline_and_private(pid, server_dir / "state" / handle.instance_id, run_as)
        report = await runtime.health(handle)
        view = server_dir / "state" / handle.instance_id / "pinned" / "model" / weights.name
        assert report.models == (str(view),)  # its view of the pinned files (pinning.md)
        await runtime.stop(handle, 5.0)
    assert not shared.exists()
    assert not any("not listed" in (e.detail or "") for e in seen if isinstance(e, StateChanged))


async def test_health_200_and_model_listed_are_not_running_without_a_token(
    server_dir: Path, mlx_program: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """A chat template that always raises: /health says ok and /v1/models lists the model,
    but every completion is refused (HTTP 404). The instance stays Degraded, saying the
    first token failed; it is never Running."""
    model = readable_tiny_mlx(unprivileged.directory("models") / "tiny-mute")
    template = model / "tokenizer_config.json"
    tokenizer = json.loads(template.read_text())
    tokenizer["chat_template"] = "{{ raise_exception('this model does not chat') }}"
    template.write_text(json.dumps(tokenizer))
    config = managed_config(server_dir, mlx_program, model, unprivileged.run_as)
    async with open_runtime(config, node_id="test") as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(mlx_spec("tiny", free_port))
        await runtime.start(handle)
        seen = await events_until(events, detail_has("first token failed"))
        assert InstanceState.RUNNING not in states(seen)
        status = runtime.status(handle)
        assert (status.state, status.last_probe) == (InstanceState.DEGRADED, "up")
        assert "this model does not chat" in (status.detail or "")
        with pytest.raises(BackendError, match="this model does not chat"):
            await runtime.deep_health(handle)
        evidence = await runtime.stop(handle, 5.0)
    assert evidence.signal == signal.SIGTERM
    assert b'"POST /v1/chat/completions HTTP/1.1" 404' in evidence.stderr
    assert b'"POST /v1/chat/completions HTTP/1.1" 200' not in evidence.stderr


async def test_a_generator_dead_at_start_is_never_running(
    server_dir: Path, mlx_program: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """FC-07: the config asks for a third layer the weights lack, so the generation thread
    dies about 4 ms after the server listens; /health turns 503 "unavailable", the process
    lives on. Degraded with the reason, never Running (not even in those 4 ms, when /health
    is 200 and the model listed: Running needs a token), and deep health refuses."""
    broken = broken_copy(unprivileged.directory("models") / "tiny-broken")
    config = managed_config(server_dir, mlx_program, broken, unprivileged.run_as)
    async with open_runtime(config, node_id="test") as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(mlx_spec("tiny", free_port))
        await runtime.start(handle)
        seen = await events_until(events, detail_has("generation thread died"))
        assert InstanceState.RUNNING not in states(seen)
        assert (runtime.status(handle)).state is InstanceState.DEGRADED
        with pytest.raises(BackendError, match="not up"):
            await runtime.deep_health(handle)
        evidence = await runtime.stop(handle, 5.0)
    assert evidence.signal == signal.SIGTERM
    assert b"generation thread died" in evidence.stderr


async def test_a_generator_killed_after_ready_is_health_killed_and_restarted(
    server_dir: Path, mlx_program: Path, tiny_mlx: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """FC-07 after readiness: a foreign client's malformed ``stop`` (a list in the list)
    raises inside mlx_lm.server 0.32.2's generation loop, outside any handler, so the
    thread dies while the process lives and /health answers 503 "unavailable". Three such
    probes in a row and the runtime kills it ("health kill"); the restart policy starts a
    new process, which is Running again after its own first token."""
    config = managed_config(server_dir, mlx_program, tiny_mlx, unprivileged.run_as)
    fast = Supervision(restart=RestartPolicy(base_s=0.1, cap_s=0.1, jitter=0.0))
    async with open_runtime(config, node_id="test") as runtime:
        events = await runtime.subscribe()
        handle, first = await start_and_run(runtime, mlx_spec("tiny", free_port), fast, events)
        (pid,) = started(first)
        poisoned = trio.current_time()
        await send_poison(f"http://127.0.0.1:{free_port}")
        seen = await events_until(events, becomes(InstanceState.RUNNING))
        final = runtime.status(handle)
        await runtime.stop(handle, 5.0)
    exits = [e for e in seen if isinstance(e, ProcessExited)]
    assert [(e.pid, e.reason) for e in exits] == [(pid, StopReason.HEALTH_KILL)]
    assert exits[0].signal == signal.SIGTERM
    restarts = [e for e in seen if isinstance(e, RestartScheduled)]
    assert [(e.attempt, e.delay_s) for e in restarts] == [(1, 0.1)]
    (again,) = started(seen)
    assert again != pid
    assert not group_alive(pid)
    killed = detail_has("unhealthy for ")
    (why,) = [e.detail for e in seen if killed(e) and isinstance(e, StateChanged)]
    assert "generation thread died" in (why or "")
    assert (final.state, final.pid, final.restarts) == (InstanceState.RUNNING, again, 1)
    kill_s, back_s = exits[0].at - poisoned, seen[-1].at - exits[0].at
    print(f"mlx health kill: exited {kill_s:.2f} s after the poison, Running {back_s:.2f} s later")


async def send_poison(base_url: str) -> None:
    """A chat completion whose ``stop`` is a list in a list. The sender's answer (404
    "generation thread died", about 1 s later) does not matter and may be cut short by the
    kill, so it is not awaited for long."""
    poison = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stop": [["x"]]}
    async with ProbeClient.open(base_url, timeout_s=0.3) as foe:
        with contextlib.suppress(BackendError):
            await foe.post_json(CHAT, poison)


# Adopted.


async def test_adopted_mlx_gets_only_gets_until_deep_health_and_unload_only_forgets(
    tiny_mlx: Path, free_port: int, tmp_path: Path
) -> None:
    """Checklist 18 to 22 for mlx-lm: Running on GETs alone; deep health is the one POST and
    names no model (FC-09); stop is refused; unload forgets and the server lives on."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    program = Path(sys.executable).parent / "mlx_lm.server"
    log = tmp_path / "server.log"
    async with mlx_server(program, tiny_mlx, free_port, cache, log) as server:
        async with ProbeClient.open(server.base_url, timeout_s=READY_S) as probe:
            await wait_report(probe, server, is_up)
        async with open_recording_proxy(server.base_url) as proxy:
            spec = InferenceSpec(
                role="seen",
                runtime=InferFlavor.MLX_LM,
                model="tiny-mlx",
                serve=ServeArgs(port=proxy.port),
            )
            async with open_runtime(InferConfig.adopted(InferFlavor.MLX_LM)) as runtime:
                handle = await runtime.load(spec)
                await runtime.start(handle)
                with trio.fail_after(READY_S):
                    await runtime.wait_state(handle, InstanceState.RUNNING)
                assert (await runtime.health(handle)).models == (str(tiny_mlx),)
                with pytest.raises(Unsupported, match="never stops"):
                    await runtime.stop(handle)
                assert proxy.methods == {"GET"}, proxy.requests
                result = await runtime.deep_health(handle)
                await runtime.unload(handle)
                assert (runtime.status(handle)).state is InstanceState.UNKNOWN
                heard = len(proxy.requests)
                await trio.sleep(1.2)  # longer than the monitor's 1 s: nothing may follow
            assert len(proxy.requests) == heard, proxy.requests[heard:]
        assert server.process.returncode is None, "an adopted server is never signalled"
        async with ProbeClient.open(server.base_url, timeout_s=READY_S) as probe:
            assert is_up(await probe.report(InferFlavor.MLX_LM))
    assert result.text.strip() in TINY_WORDS
    posts = [r for r in proxy.requests if r.method != "GET"]
    assert [(r.method, r.target) for r in posts] == [("POST", CHAT)]
    assert "model" not in json.loads(posts[0].body)
