"""Readiness on Python ``http.server`` servers: a fake llama-server built on it and the real
mlx_lm.server (issue 16: keep-alive against ``http.server`` once added 40 ms a request).

The product: a managed runtime (as ``nobody`` when root), one instance per sample: ``load``,
``follow_logs``, ``start``. Figure: the server's readiness line read -> its Running arrives
(``LogLine.at`` moved to trio's clock; as ``bench_readiness_real.py``). Running needs
``/health``, the model list, the listener's owner and one real token, so it is at least three
HTTP round trips after the line.

Baseline B1, right after each Running (the server still up): the same three requests from a
bare keep-alive httpx client opened then (``GET /health``, ``GET /v1/models``, one ``POST
/v1/chat/completions`` of one token): what those round trips cost on this server. Its
token is the server's second (warm); Running waited for the first (for mlx_lm.server the
first generation is the slower one).

Servers: ``_http_server_fake.py`` (HTTP/1.1 kept alive; llama.cpp flavor), and the real
mlx_lm.server on the tiny mlx model (HTTP/1.0: a connection per request; mlx flavor).
Settings: ``BENCH_SAMPLES`` (8). ``--quick``: 2. Run: ``.venv/bin/python
bench/bench_readiness_servers.py`` (about a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
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
    env_float,
    free_port,
    load_note,
    next_event,
    print_context,
    print_table,
    summary,
    workspace,
)

from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceState,
    LogLine,
    ManagedConfig,
    ModelFormat,
    ModelRegistry,
    ServeArgs,
    StateChanged,
    open_runtime,
)
from inferactors.testing import write_python_program
from inferactors.testing._tiny_mlx import write_tiny_mlx

SAMPLES = int(env_float("BENCH_SAMPLES", 8, 2))
SEED = int(os.environ.get("BENCH_SEED", "3"))
TARGET_READY_S = 0.010
READY_WORDS = ("model loaded", "listening on", "Starting httpd")
COMPLETION = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
HERE = Path(__file__).resolve().parent


@attrs.frozen
class Sample:
    """Seconds: the readiness line read -> Running arrives; B1's three round trips."""

    line_to_running: float
    bare: float


def http_server_config(ws: Workspace) -> InferConfig:
    program = write_python_program(
        ws.directory("bin") / "fake-http-server",
        entry="_http_server_fake:main",
        python=ws.python,
        sys_path=(*ws.sys_path, str(HERE)),
    )
    managed = ManagedConfig(
        registry=ws.registry, data_root=ws.directory("state"), serve_program=program,
        run_as=ws.run_as,
    )  # fmt: skip
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


def mlx_config(ws: Workspace) -> InferConfig:
    model = write_tiny_mlx(ws.directory("models") / "tiny-mlx")
    for path in (model, *model.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    registry = ws.directory("registry") / "models.json"
    ModelRegistry.open(registry).add(model, name="tiny", format=ModelFormat.MLX)
    program = write_python_program(
        ws.directory("bin") / "mlx_lm.server",
        entry="mlx_lm.server:main",
        python=ws.python,
        sys_path=ws.sys_path,
    )
    managed = ManagedConfig(
        registry=registry, data_root=ws.directory("state"), serve_program=program,
        run_as=ws.run_as,
    )  # fmt: skip
    return InferConfig.managing(InferFlavor.MLX_LM, managed)


async def one(runtime: InferRuntime, flavor: InferFlavor) -> Sample:
    """Load, follow its lines, start, wait for Running, time B1; stop and unload."""
    events = await runtime.subscribe(buffer=1000)
    port = free_port()
    spec = InferenceSpec(role="chat", runtime=flavor, model="tiny", serve=ServeArgs(port=port))
    handle = await runtime.load(spec)
    iid = handle.instance_id
    lines: list[LogLine] = []
    with events, runtime.follow_logs(handle) as follow:
        await runtime.start(handle)
        _, running = await next_event(
            events,
            StateChanged,
            lambda e: e.instance_id == iid and e.new is InstanceState.RUNNING,
            timeout_s=120,
        )
        wall_to_trio = trio.current_time() - time.time()
        bare = await three_round_trips(port)
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
    return Sample(running - (ready[-1].at + wall_to_trio), bare)


async def three_round_trips(port: int) -> float:
    """Seconds for ``GET /health``, ``GET /v1/models`` and one token, bare httpx."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
        began = trio.current_time()
        (await client.get("/health")).raise_for_status()
        (await client.get("/v1/models")).raise_for_status()
        answer = await client.post("/v1/chat/completions", content=json.dumps(COMPLETION))
        answer.raise_for_status()
        return trio.current_time() - began


async def measure(config: InferConfig, flavor: InferFlavor) -> list[Sample]:
    async with open_runtime(config, node_id="bench") as runtime:
        return [await one(runtime, flavor) for _ in range(SAMPLES)]


async def main() -> None:
    print_context("bench_readiness_servers", SEED)
    rows: list[Row] = []
    with workspace() as ws:
        kinds = [("http.server fake", http_server_config(ws), InferFlavor.LLAMACPP)]
        if shutil.which("mlx_lm.server", path=str(Path(sys.executable).parent)):
            kinds.append(("mlx_lm.server", mlx_config(ws), InferFlavor.MLX_LM))
        for number, (name, config, flavor) in enumerate(kinds):
            samples = await measure(config, flavor)
            key = f"B{number + 1}"
            line = Summary.of([s.line_to_running for s in samples])
            bare = Summary.of([s.bare for s in samples])
            rows.append(Row(f"{name}: ready line -> Running", line, TARGET_READY_S, key))
            rows.append(Row(f"{name}: bare 3 round trips", bare, key=key))
            summary("readiness", server=name, line_to_running=line.median, bare=bare.median)
    print_table(
        "Readiness on http.server-based servers",
        rows,
        MS,
        [
            "Running needs at least the three round trips of its baseline after the line.",
            f"{SAMPLES} samples each; {load_note()} at the end.",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
