"""A server that refuses our requests for want of an API key is a configuration error
(issue 9, breaker's part 1): it sat at "loading model" or "waiting for a first token" until
the readiness deadline, then was restarted onto the same refusal.

Managed: a fake llama-server that answers 401 ``Invalid API Key`` to all but ``/health``
(as llama-server started with ``--api-key`` does) is stopped at once and the supervisor gives
up, saying so. Adopted: the real llama-server started by hand with ``--api-key`` is reported
as needing a key, and never signalled.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import httpx
import trio

from e2e.field_support import SLACK_S, WAIT_S, Bench, chat, policy, supervising
from inferactors import (
    Event,
    GaveUp,
    InferConfig,
    InferFlavor,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    StateChanged,
    StopReason,
    open_runtime,
)
from inferactors._stop_reasons import Diagnosis, FaultKind
from inferactors.testing._fake_faults import FakeServerFaults

NEEDS_KEY = "the server refuses our requests (HTTP 401: Invalid API Key): set serve.api_key_file"


async def test_a_managed_server_that_wants_a_key_is_a_config_error_at_once(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(require_api_key=True))
    config = bench.config(program, restart=policy(3), readiness_timeout_s=WAIT_S)
    async with supervising(config) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        exited = await rec.next(ProcessExited)
        gave_up = await rec.next(GaveUp)
        assert exited.at - started.at < 5.0  # the python fake's start-up: no deadline waited
        assert exited.reason is StopReason.STARTUP_FAILURE
        assert exited.diagnosis == Diagnosis(
            FaultKind.REFUSES_REQUESTS, NEEDS_KEY, exited.last_lines
        )
        assert (gave_up.attempts, gave_up.why) == (0, f"config-error: {NEEDS_KEY}")
        await trio.sleep(0.5)
        assert len(rec.of(ProcessStarted)) == 1
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "config-error")
        assert (status.detail, status.diagnosis) == (f"failed to start: {NEEDS_KEY}", NEEDS_KEY)
        assert status.supervision == f"gave up: config-error: {NEEDS_KEY}"


@contextmanager
def llama_server_with_key(
    llama_server: Path, model: Path, port: int
) -> Iterator[subprocess.Popen[bytes]]:
    """The real llama-server started by hand with ``--api-key``."""
    argv = [str(llama_server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with subprocess.Popen(
        [*argv, "--api-key", "k"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as server:
        try:
            yield server
        finally:
            server.terminate()
            server.wait(10)


async def _until_healthy(port: int) -> None:
    async with httpx.AsyncClient() as client:
        with trio.fail_after(WAIT_S):
            while True:
                try:
                    if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.1)


async def test_an_adopted_llama_server_that_wants_a_key_says_so_and_is_never_signalled(
    llama_server: Path, tiny_gguf: Path, free_port: int
) -> None:
    with llama_server_with_key(llama_server, tiny_gguf, free_port) as server:
        await _until_healthy(free_port)
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
            events = await runtime.subscribe()
            handle = await runtime.load(chat(free_port))
            await runtime.start(handle)
            with trio.fail_after(SLACK_S + 3.0):
                said = await _change_to(events, NEEDS_KEY)
            assert (said.new, said.serving) == (InstanceState.DEGRADED, False)
            await trio.sleep(1.5)  # probes go on: reported, never acted on
            status = runtime.status(handle)
            assert (status.state, status.detail) == (InstanceState.DEGRADED, NEEDS_KEY)
        assert server.poll() is None  # never signalled


async def _change_to(events: trio.MemoryReceiveChannel[Event], detail: str) -> StateChanged:
    async for event in events:
        if isinstance(event, StateChanged) and event.detail == detail:
            return event
    raise AssertionError("the event channel closed")


async def test_an_adopted_llama_server_given_its_key_file_is_running(
    llama_server: Path, tiny_gguf: Path, free_port: int, tmp_path: Path
) -> None:
    """The same server, adopted with ``serve.api_key_file`` holding its key: every probe
    sends the key, so it is Running and passes deep health; nothing advises the setting."""
    key_file = tmp_path / "key"
    key_file.write_text("k\n")
    key_file.chmod(0o600)
    with llama_server_with_key(llama_server, tiny_gguf, free_port) as server:
        await _until_healthy(free_port)
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
            spec = attrs.evolve(
                chat(free_port),
                serve=attrs.evolve(chat(free_port).serve, api_key_file=str(key_file)),
            )
            handle = await runtime.load(spec)
            await runtime.start(handle)
            status = runtime.status(handle)
            assert status.state is InstanceState.RUNNING, status
            assert "api_key_file" not in (status.detail or "")
            assert (await runtime.deep_health(handle)).text is not None
        assert server.poll() is None  # never signalled
