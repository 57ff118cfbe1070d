"""Readiness on the real llama-server (issue 11, item 3).

The product: a managed runtime running the real llama-server on the tiny GGUF model (as
``nobody`` when root), one instance per sample: ``load``, then ``follow_logs`` (every line
the runtime reads from the server, stamped when read), then ``start``. Figures:

* "server ready" line read -> Running arrives: the server prints ``model loaded`` and
  ``listening on http://...``; ready is when the runtime read the LAST of those lines before
  Running (``LogLine.at``, wall clock, moved to trio's clock), Running is when the
  ``StateChanged`` to Running reached this subscriber. Target: median at most 10 ms.
* start -> Running arrives: from just before ``runtime.start`` (which also checks the
  model's pin and spawns) to that event. Target: at most 1.2x the baseline.

Baseline, interleaved pair by pair (a seeded coin picks which goes first): B1 bare spawn of
the same program with the same model, host and port (as the same user) + a tight poll of
``GET /health`` every 1 ms until 200 + one ``POST /v1/chat/completions`` of one token; from
just before the spawn to that completion's answer.

Without the real llama-server (``$INFERACTORS_LLAMA_SERVER`` or the cache path) the script
prints why and skips. Settings: ``BENCH_SAMPLES`` (10). ``--quick``: 2.
Run: ``.venv/bin/python bench/bench_readiness_real.py`` (about 30 s).
"""

from __future__ import annotations

import json
import os
import random
import ssl
import subprocess
import time
from pathlib import Path

import attrs
import httpx
import trio
from _common import (
    MS,
    Row,
    Summary,
    Workspace,
    chat_spec,
    env_float,
    free_port,
    load_note,
    next_event,
    print_context,
    print_table,
    workspace,
)
from bench_idle import DEFAULT_LLAMA_SERVER, llama_server

from inferactors import (
    InferConfig,
    InferFlavor,
    InferRuntime,
    InstanceState,
    LogLine,
    ManagedConfig,
    StateChanged,
    open_runtime,
)

SAMPLES = int(env_float("BENCH_SAMPLES", 10, 2))
SEED = int(os.environ.get("BENCH_SEED", "3"))
TARGET_READY_S = 0.010
TARGET_RATIO = 1.2
READY_WORDS = ("model loaded", "listening on")
TIGHT_POLL_S = 0.001
COMPLETION = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@attrs.frozen
class Managed:
    """One product sample (seconds): ready line read -> Running, start -> Running."""

    line_to_running: float
    start_to_running: float
    line: str


def config(ws: Workspace, program: Path) -> InferConfig:
    """A managed llama.cpp config running the real ``program``, default supervision."""
    managed = ManagedConfig(
        registry=ws.registry,
        data_root=ws.directory("state"),
        serve_program=program,
        run_as=ws.run_as,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


async def one_managed(runtime: InferRuntime) -> Managed:
    """Load, follow its lines, start, wait for Running; unload."""
    events = await runtime.subscribe(buffer=1000)
    handle = await runtime.load(chat_spec(free_port()))
    iid = handle.instance_id
    lines: list[LogLine] = []
    with events, runtime.follow_logs(handle) as follow:
        started = trio.current_time()
        await runtime.start(handle)
        _, running = await next_event(
            events,
            StateChanged,
            lambda e: e.instance_id == iid and e.new is InstanceState.RUNNING,
            timeout_s=120,
        )
        wall_to_trio = trio.current_time() - time.time()
        while True:
            try:
                lines.append(follow.receive_nowait())
            except trio.WouldBlock:
                break
    await runtime.stop(handle, 5.0)
    await runtime.unload(handle)
    ready = [line for line in lines if any(word in line.text for word in READY_WORDS)]
    ready = [line for line in ready if line.at + wall_to_trio <= running]
    if not ready:
        raise RuntimeError(f"no ready line before Running in {[x.text for x in lines][-10:]}")
    last = ready[-1]
    return Managed(running - (last.at + wall_to_trio), running - started, last.text.strip())


async def one_bare(ws: Workspace, program: Path, context: ssl.SSLContext) -> float:
    """Seconds from spawn to the first token's answer: spawn, 1 ms poll, one completion."""
    port = free_port()
    model = ws.root / "models" / "tiny.gguf"
    argv = [str(program), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, verify=context, timeout=30.0) as client:
        began = trio.current_time()
        process = await trio.lowlevel.open_process(
            argv,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=ws.run_as,
        )
        try:
            with trio.fail_after(120):
                await until_healthy(client)
                answer = await client.post("/v1/chat/completions", content=json.dumps(COMPLETION))
            done = trio.current_time()
            answer.raise_for_status()
        finally:
            process.terminate()
            with trio.move_on_after(5):
                await process.wait()
            process.kill()
            await process.wait()
    return done - began


async def until_healthy(client: httpx.AsyncClient) -> None:
    """``GET /health`` every `TIGHT_POLL_S` until it says 200."""

    while True:
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        await trio.sleep(TIGHT_POLL_S)


async def measure(program: Path) -> tuple[list[Managed], list[float]]:
    """`SAMPLES` pairs, interleaved, the order of each pair drawn from the seed."""
    rng = random.Random(SEED)
    context = ssl.create_default_context()
    managed: list[Managed] = []
    bare: list[float] = []
    with workspace() as ws:
        async with open_runtime(config(ws, program), node_id="bench") as runtime:
            for _ in range(SAMPLES):
                ours_first = rng.random() < 0.5
                if not ours_first:
                    bare.append(await one_bare(ws, program, context))
                managed.append(await one_managed(runtime))
                if ours_first:
                    bare.append(await one_bare(ws, program, context))
    return managed, bare


async def main() -> None:
    print_context("bench_readiness_real", SEED)
    program = llama_server()
    if program is None:
        print(f"SKIPPED: no real llama-server (INFERACTORS_LLAMA_SERVER, {DEFAULT_LLAMA_SERVER})")
        return
    managed, bare = await measure(program)
    start = Summary.of([m.start_to_running for m in managed])
    floor = Summary.of(bare)
    rows = [
        Row(
            "ready line read -> Running arrives",
            Summary.of([m.line_to_running for m in managed]),
            TARGET_READY_S,
        ),
        Row("start -> Running arrives", start, floor.median * TARGET_RATIO, "B1"),
        Row("spawn + 1 ms poll + one completion", floor, key="B1"),
    ]
    lines = sorted({m.line for m in managed})
    print_table(
        "Readiness on the real llama-server (tiny GGUF)",
        rows,
        MS,
        [
            f"start -> Running is {start.median / floor.median:.2f}x B1 (target <= "
            f"{TARGET_RATIO}x, i.e. the target column is {TARGET_RATIO} x B1's median).",
            f"ready lines seen: {lines[:2]}",
            f"{SAMPLES} pairs; {load_note()} at the end.",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
