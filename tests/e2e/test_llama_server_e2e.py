"""End to end against the real llama-server on the tiny model (issue 2's acceptance).

Managed: inferactors launches it, sees it reach Running, gets one real token, stops it and
leaves nothing behind. Adopted: the test starts llama-server itself, puts a recording proxy
in front, and inferactors only ever sends it GET requests (apart from deep health), never
signals it, and unload only forgets it.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psutil
import pytest
import trio

from inferactors import InvalidState, Unsupported, open_runtime
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._config.config import InferConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._events import ExposureDetected, ProcessExited, StateChanged
from inferactors._flavor import InferFlavor
from inferactors._status import InstanceState
from inferactors._stop_reasons import StopReason
from inferactors.testing._recording_proxy import open_recording_proxy
from proc_checks import group_alive

READY_S = 60.0


async def wait_for_state(
    runtime: InferRuntime, handle: InstanceHandle, state: InstanceState
) -> None:
    with trio.fail_after(READY_S):
        await runtime.wait_state(handle, state)


async def test_managed_llama_server_runs_answers_one_token_and_stops_clean(
    managed_config: InferConfig, free_port: int
) -> None:
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=free_port)
    )
    async with open_runtime(managed_config, node_id="test") as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(spec)
        assert (runtime.status(handle)).state is InstanceState.LOADED
        instance_dir = managed_config.managed.data_root / handle.instance_id  # type: ignore[union-attr]
        assert instance_dir.is_dir()
        await runtime.start(handle)
        with pytest.raises(InvalidState, match="already running"):
            await runtime.start(handle)
        await wait_for_state(runtime, handle, InstanceState.RUNNING)
        status = runtime.status(handle)
        assert status.pid is not None
        pid = status.pid

        result = await runtime.deep_health(handle)
        assert result.text.strip() != ""
        assert result.finish_reason == "length"  # exactly one token was asked for

        evidence = await runtime.stop(handle, 5.0)
        assert evidence.instance_id == handle.instance_id
        assert evidence.runtime == "infer.llamacpp"
        assert evidence.exit_code == 0 or evidence.signal is not None
        assert evidence.args[0] == "-m"
        assert evidence.args[1].startswith("/proc/self/fd/")  # the verified descriptor
        assert evidence.args[2] == "--alias"
        assert evidence.args[3].endswith("tiny.gguf")  # it lists the model as before
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert not group_alive(pid)
        stopped = runtime.status(handle)
        assert stopped.state is InstanceState.EXITED
        assert stopped.stop_reason == "requested"
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)

        await runtime.unload(handle)
        assert not instance_dir.exists()

    seen = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    states = [e.new for e in seen if isinstance(e, StateChanged)]
    assert InstanceState.RUNNING in states
    assert states[-1] is InstanceState.EXITED
    exits = [e for e in seen if isinstance(e, ProcessExited)]
    assert [e.reason for e in exits] == [StopReason.REQUESTED]


@pytest.fixture(params=["127.0.0.1"])
async def own_llama_server(
    llama_server: Path, tiny_gguf: Path, free_port: int, request: pytest.FixtureRequest
) -> AsyncIterator[int]:
    """A llama-server started by the test itself (not by inferactors), bound to the
    parametrized host; yields its port."""
    port = free_port
    host = str(request.param)
    argv = [str(llama_server), "-m", str(tiny_gguf), "--host", host, "--port", str(port)]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            with trio.fail_after(READY_S):
                while True:
                    try:
                        if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await trio.sleep(0.05)
        yield port
        assert process.returncode is None, "inferactors must never stop an adopted server"
    finally:
        process.kill()
        await process.wait()


async def test_adopted_llama_server_gets_only_gets_and_unload_only_forgets(
    own_llama_server: int,
) -> None:
    upstream = f"http://127.0.0.1:{own_llama_server}"
    async with open_recording_proxy(upstream) as proxy:
        spec = InferenceSpec(
            role="seen",
            runtime=InferFlavor.LLAMACPP,
            model="tiny",
            serve=ServeArgs(port=proxy.port),
        )
        config = InferConfig.adopted(InferFlavor.LLAMACPP)
        async with open_runtime(config, node_id="test") as runtime:
            assert runtime.id == "infer.llamacpp.adopted"
            admission = await runtime.admit(spec)
            assert admission.notes[0] == f"endpoint http://127.0.0.1:{proxy.port}"
            handle = await runtime.load(spec)
            await runtime.start(handle)
            await wait_for_state(runtime, handle, InstanceState.RUNNING)
            report = await runtime.health(handle)
            assert report.lists("tiny"), report.models
            assert await runtime.served_model(handle) == "tiny"
            with pytest.raises(Unsupported, match="never stops"):
                await runtime.stop(handle)
            await runtime.unload(handle)
            status = runtime.status(handle)
            assert status.state is InstanceState.UNKNOWN
            await trio.sleep(0.2)  # nothing more may arrive after unload
        assert proxy.requests, "the proxy saw no request at all"
        assert proxy.methods == {"GET"}, proxy.requests
    async with httpx.AsyncClient(trust_env=False) as client:
        assert (await client.get(f"{upstream}/health")).status_code == 200


async def test_adopted_deep_health_is_the_only_post(own_llama_server: int) -> None:
    upstream = f"http://127.0.0.1:{own_llama_server}"
    async with open_recording_proxy(upstream) as proxy:
        spec = InferenceSpec(
            role="seen", runtime=InferFlavor.LLAMACPP, serve=ServeArgs(port=proxy.port)
        )
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
            handle = await runtime.load(spec)
            result = await runtime.deep_health(handle)
            assert result.text.strip() != ""
            await runtime.unload(handle)
        posts = [r for r in proxy.requests if r.method != "GET"]
        assert [(r.method, r.target) for r in posts] == [("POST", "/v1/chat/completions")]
        assert b'"max_tokens":1' in posts[0].body.replace(b" ", b"")


@pytest.mark.parametrize("own_llama_server", ["0.0.0.0"], indirect=True)
async def test_fc15_adopted_exposure_is_reported_and_never_acted_on(
    own_llama_server: int,
) -> None:
    spec = InferenceSpec(
        role="lan", runtime=InferFlavor.LLAMACPP, serve=ServeArgs(port=own_llama_server)
    )
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(spec)
        await runtime.start(handle)
        detail = ""
        with trio.fail_after(READY_S):
            async for event in events:
                if isinstance(event, ExposureDetected):
                    detail = event.detail
                    break
        assert "0.0.0.0" in detail
        assert "never signals" in detail
        status = runtime.status(handle)
        assert status.state is InstanceState.RUNNING
        assert status.detail is not None
        assert "beyond loopback" in status.detail
        await runtime.unload(handle)
