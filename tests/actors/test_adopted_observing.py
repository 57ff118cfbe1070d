"""inferactors only observes an adopted llama.cpp server: GET requests and a status mapping.

Checklist items 20 to 22: an adopted server only ever receives GET requests, a gone server
cannot be started and stop is unsupported, and unload only forgets a real server (started
by the test itself, ``tests/helpers/runtime_server.py``), which keeps running. Items 23 to
26: how /health and /v1/models answers map to Running, Degraded and Exited, a 302 is not
followed, and the status of an unknown handle is Unknown without raising.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from actors.adopted_support import FakeLlama, adopted, chat
from inferactors import (
    BackendError,
    InferConfig,
    InferFlavor,
    InstanceHandle,
    InstanceState,
    UnknownInstance,
    Unsupported,
    open_runtime,
)
from inferactors._actors.instance.probing import ADMISSION_REUSE_S
from inferactors._policy.probe_report import Unreachable

HELPER = Path(__file__).parents[1] / "helpers" / "runtime_server.py"


# What an adopted server receives (items 20, 21, 22).


async def test_an_adopted_server_only_ever_receives_get_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, quiet_net=True) as runtime:
        await runtime.admit(chat())
        handle = await runtime.load(chat())
        await runtime.start(handle)
        await trio.sleep(5.0)  # the monitor probes meanwhile
        runtime.status(handle)
        await runtime.health(handle)
        await runtime.unload(handle)
        seen = len(server.requests)
        await trio.sleep(30.0)
        assert len(server.requests) == seen, "requests arrived after unload"
    assert server.methods == {"GET"}
    assert {"/health", "/v1/models"} <= set(server.paths)
    assert server.paths.count("/health") > 5, "the monitor should have probed repeatedly"


async def test_adopted_start_of_a_gone_server_fails_and_stop_is_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises(Unsupported, match="is adopted: inferactors observes it and never"):
            await runtime.stop(handle)
        server.down = True
        await trio.sleep(ADMISSION_REUSE_S + 0.1)  # admission's report no longer stands
        with pytest.raises(BackendError) as refused:
            await runtime.start(handle)
        assert type(refused.value) is BackendError
        assert "not answering" in str(refused.value)
        assert "inferactors does not start adopted servers" in str(refused.value)
        with pytest.raises(Unsupported):
            await runtime.stop(handle, 0.0)
        assert isinstance((await runtime.health(handle)).health, Unreachable)  # a probe now
    assert server.methods == {"GET"}


@asynccontextmanager
async def own_server(tmp_path: Path, port: int) -> AsyncIterator[tuple[trio.Process, Path]]:
    """Our helper server, started by the test itself (not by inferactors) on ``port``.

    Yields the process and the file its request lines go to.
    """
    log = tmp_path / "requests.log"
    argv = [sys.executable, "-I", str(HELPER), "-m", "/m/tiny.gguf", "--host", "127.0.0.1"]
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            [*argv, "--port", str(port)], stdout=out, stderr=subprocess.DEVNULL, cwd=tmp_path
        )
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            with trio.fail_after(30):
                while not await _answers(client, port):  # noqa: ASYNC110  a real server
                    await trio.sleep(0.02)
        yield process, log
    finally:
        process.kill()
        await process.wait()


async def _answers(client: httpx.AsyncClient, port: int) -> bool:
    try:
        return (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    except httpx.TransportError:
        return False


async def test_unload_only_forgets_a_real_server_which_keeps_running(
    tmp_path: Path, free_port: int
) -> None:
    async with (
        own_server(tmp_path, free_port) as (process, log),
        open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime,
    ):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        with trio.fail_after(30):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        await runtime.unload(handle)
        assert (runtime.status(handle)).state is InstanceState.UNKNOWN
        for command in (runtime.start, runtime.stop, runtime.health, runtime.unload):
            with pytest.raises(UnknownInstance):
                await command(handle)
        await trio.sleep(0.2)  # a probe already on the wire may still be logged
        lines_at_unload = log.read_text().splitlines()
        await trio.sleep(1.5)  # longer than the monitor's 1 s period
        assert log.read_text().splitlines() == lines_at_unload, "requests after unload"
        assert process.returncode is None, "inferactors must never stop an adopted server"
        async with httpx.AsyncClient(trust_env=False) as client:
            assert await _answers(client, free_port)
    assert lines_at_unload, "the server saw no request at all"
    assert all(line.startswith("GET ") for line in lines_at_unload), lines_at_unload


# Status mapping (items 23 to 26).


async def test_status_is_running_on_200_and_degraded_loading_on_503(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, quiet_net=True) as runtime:
        handle = await runtime.load(chat())
        running = runtime.status(handle)  # what the load's probe found
        assert (running.state, running.detail) == (InstanceState.RUNNING, "server up")
        await runtime.start(handle)  # watched from now on
        server.health = 503
        with trio.fail_after(5):  # the monitor probes every second once the server is up
            loading = await runtime.wait_state(handle, InstanceState.DEGRADED)
        assert (loading.state, loading.detail) == (InstanceState.DEGRADED, "loading model")
        assert loading.pid is None


async def test_an_unlisted_model_is_degraded_and_a_gone_server_is_exited_until_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(models=("other-model.gguf",))
    async with adopted(server, quiet_net=True) as runtime:
        handle = await runtime.load(chat())
        unlisted = runtime.status(handle)  # what the load's probe found
        assert unlisted.state is InstanceState.DEGRADED
        assert unlisted.detail == "model tiny is not listed by the server"
        await runtime.start(handle)  # watched from now on
        server.down = True
        with trio.fail_after(5):  # the monitor probes every second
            gone = await runtime.wait_state(handle, InstanceState.EXITED)
        assert gone.detail is not None
        assert "not restart" in gone.detail
        assert "unreachable" in gone.detail
        server.down, server.models = False, ("/srv/models/tiny.gguf",)  # exact: the basename
        with trio.fail_after(5):
            await runtime.wait_state(handle, InstanceState.RUNNING)


async def test_a_monitored_server_that_goes_away_is_reported_exited_by_an_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, quiet_net=True) as runtime:
        handle = await runtime.load(chat())
        await runtime.start(handle)
        with trio.fail_after(5):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        server.down = True
        with trio.fail_after(5):  # the monitor probes every second once the server is up
            exited = await runtime.wait_state(handle, InstanceState.EXITED)
        assert exited.detail is not None
        assert "not restart" in exited.detail


@pytest.mark.parametrize(
    ("models_status", "state", "detail"),
    [
        (200, InstanceState.RUNNING, "server up"),
        (503, InstanceState.DEGRADED, "loading model"),
        (500, InstanceState.DEGRADED, "/v1/models returned HTTP 500"),
    ],
)
async def test_a_404_health_falls_back_to_the_model_list(
    autojump_clock: trio.testing.MockClock,
    models_status: int,
    state: InstanceState,
    detail: str,
) -> None:
    server = FakeLlama(health=404, models_status=models_status)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())  # one probe; the status shows what it found
        assert server.paths == ["/health", "/v1/models"]
        status = runtime.status(handle)
        assert (status.state, status.detail) == (state, detail)


async def test_a_302_is_not_followed_and_is_degraded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(health=302)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        status = runtime.status(handle)
        assert status.state is InstanceState.DEGRADED
        assert status.detail == "/health returned HTTP 302"
    assert set(server.paths) == {"/health"}


async def test_the_status_of_an_unknown_handle_is_unknown_and_does_not_raise(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        ghost = InstanceHandle("infer.llamacpp.adopted", "ghost-00000000-node1", "ghost")
        status = runtime.status(ghost)
        assert status.state is InstanceState.UNKNOWN
        with pytest.raises(UnknownInstance):
            await runtime.start(ghost)
        with pytest.raises(UnknownInstance):
            await runtime.spec_of(ghost)
