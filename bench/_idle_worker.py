"""One side of ``bench_idle.py``, in its own process.

``python bench/_idle_worker.py MODE PROGRAM MODEL REGISTRY DATA_ROOT RUN_AS PORT ADOPT_PORT``
(RUN_AS ``-`` for none). It brings up its side, prints ``{"ready": ..., "server": pid}``
and idles until EOF on stdin (answering ``cpu`` with its CPU time: `answer_cpu`), then
stops the server and exits. MODE:

* product: two runtimes, at their default intervals: a managed llama.cpp one running
  PROGRAM (the real llama-server) on the registry's ``tiny`` at PORT as RUN_AS, and an
  adopted one watching the fake at ADOPT_PORT; ready when both are Running.
* floor: trio + httpx + psutil: spawns PROGRAM with the same model and port as RUN_AS, polls
  ``/health`` until 200, then only waits on the process (what the issue's baseline did).
* prober: the floor, plus a keep-alive ``GET /health`` and ``GET /v1/models`` of both servers
  every 1 s (the least a supervisor that watches them does).
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import trio
from _child import answer_cpu, read_commands, say
from _common import chat_spec

from inferactors import (
    InferConfig,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ProcessStarted,
    open_runtime,
)

READY_TIMEOUT_S = 180.0
PERIOD_S = 1.0


async def product(
    program: Path, registry: Path, data_root: Path, run_as: str | None, ports: tuple[int, int]
) -> None:
    managed = ManagedConfig(
        registry=registry, data_root=data_root, serve_program=program, run_as=run_as
    )
    managing = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    adopting = InferConfig.adopted(InferFlavor.LLAMACPP)
    async with (
        open_runtime(managing, node_id="bench") as runtime,
        open_runtime(adopting, node_id="bench") as adopted,
    ):
        events = await runtime.subscribe()
        handle = await runtime.load(chat_spec(ports[0]))
        await runtime.start(handle)
        other = await adopted.load(chat_spec(ports[1]))
        await adopted.start(other)
        with trio.fail_after(READY_TIMEOUT_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)
            await adopted.wait_state(other, InstanceState.RUNNING)
        pid = next(e.pid for e in drain(events) if isinstance(e, ProcessStarted))
        say(ready="product", server=pid)
        async for command in read_commands():
            answer_cpu(command)
        await runtime.stop(handle, 5.0)


def drain(events: trio.MemoryReceiveChannel[object]) -> list[object]:
    """What is waiting in ``events`` now."""
    found = []
    while True:
        try:
            found.append(events.receive_nowait())
        except trio.WouldBlock:
            return found


async def baseline(mode: str, argv: list[str], run_as: str | None, ports: list[int]) -> None:
    context = ssl.create_default_context()
    quiet = subprocess.DEVNULL
    process = await trio.lowlevel.open_process(
        argv, start_new_session=True, user=run_as, stdout=quiet, stderr=quiet
    )
    try:
        async with httpx.AsyncClient(verify=context) as client:
            with trio.fail_after(READY_TIMEOUT_S):
                # An HTTP server tells nobody when it is up: polling is what a baseline does.
                while not await up(client, ports[0]):  # noqa: ASYNC110
                    await trio.sleep(0.05)
        psutil.Process(process.pid)  # the baseline imports and uses psutil, as the did
        say(ready=mode, server=process.pid)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(process.wait)
            if mode == "prober":
                for port in ports:
                    nursery.start_soon(probe_forever, port, context)
            async for command in read_commands():
                answer_cpu(command)
            nursery.cancel_scope.cancel()
    finally:
        process.terminate()
        with trio.move_on_after(5.0):
            await process.wait()
        process.kill()
        await process.wait()


async def up(client: httpx.AsyncClient, port: int) -> bool:
    try:
        return (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    except httpx.HTTPError:
        return False


async def probe_forever(port: int, context: ssl.SSLContext) -> None:
    """Keep-alive ``GET /health`` and ``GET /v1/models`` every `PERIOD_S`."""
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, verify=context) as client:
        next_at = trio.current_time()
        while True:
            try:
                await client.get("/health", timeout=2.0)
                await client.get("/v1/models", timeout=2.0)
            except httpx.HTTPError:
                pass  # a baseline: the figure is its cost, not its verdict
            next_at += PERIOD_S
            await trio.sleep_until(next_at)


def main() -> None:
    mode, program, model, registry, data_root, run_as_text, port, adopt_port = sys.argv[1:9]
    run_as = None if run_as_text == "-" else run_as_text
    if mode == "product":
        ports = (int(port), int(adopt_port))
        trio.run(product, Path(program), Path(registry), Path(data_root), run_as, ports)
        return
    argv = [program, "-m", model, "--host", "127.0.0.1", "--port", port]
    trio.run(baseline, mode, argv, run_as, [int(port), int(adopt_port)])


if __name__ == "__main__":
    main()
