"""Idle cost: the supervisor's CPU and memory while its servers do nothing (issue 11, item 2).

The product (``_idle_worker.py product``, its own process): one managed llama-server (the
real one, on the tiny GGUF model, as ``inferactors demo`` and tests/e2e run it; as
``nobody`` when root) plus one adopted server (a fake from ``_fake_farm.py``, which answers
at once), each runtime at its default intervals. Against it, in the same run and
interleaved (the order rotates every round):

* B1 floor: a trio + httpx + psutil process that spawned the same server (same model, host,
  port and user), polled it until ``/health`` said 200, and then only waits on it;
* B2 prober: B1 plus a keep-alive ``GET /health`` and ``GET /v1/models`` of both servers
  every 1 s, the least a watcher of those two servers does.

Figures, over a window that starts 2 s after its side is ready: CPU = the process's own CPU
time over the window / the window (cores; ``time.process_time`` read by the process itself
at both ends, every thread, not its children; psutil's figure counts 10 ms ticks, too coarse
for 0.005 core over 20 s),
RSS at the window's end (MiB), and, for what limited it, the llama-server's own CPU.

Targets: at most 0.01 core for the supervisor, and at most 1.5x B2. The real llama-server is
``$INFERACTORS_LLAMA_SERVER`` or /var/cache/inferactors/.../bin/llama-server; without it the
script prints why and skips.

Settings: ``BENCH_WINDOW_S`` (20), ``BENCH_ROUNDS`` (2). ``--quick``: a 2 s window, one round.
Run: ``.venv/bin/python bench/bench_idle.py`` (about 2 minutes; ``--quick`` about 20 s).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import attrs
import psutil
import trio
from _child import Child
from _common import (
    Workspace,
    env_float,
    free_port,
    load_note,
    print_context,
    print_grid,
    summary,
    verdict,
    workspace,
)

DEFAULT_LLAMA_SERVER = Path(
    "/var/cache/inferactors/llama-server/llama-cpp-python-0.3.36/bin/llama-server"
)
WINDOW_S = env_float("BENCH_WINDOW_S", 20.0, 2.0)
ROUNDS = int(env_float("BENCH_ROUNDS", 2, 1))
SETTLE_S = 2.0
TARGET_CORES = 0.01
TARGET_OVER_PROBER = 1.5
"""Issue 16: the product at most 1.5x B2, the bare 1 Hz keep-alive prober."""
SIDES = ("product", "floor", "prober")
LABELS = {
    "product": "product: managed llama-server + adopted fake",
    "floor": "[B1] floor: spawn + wait",
    "prober": "[B2] floor + 1 Hz keep-alive probes of both",
}


@attrs.frozen
class Idle:
    """One side's window."""

    who: str
    round_number: int
    cores: float
    rss_mib: float
    server_cores: float


def llama_server() -> Path | None:
    """The real llama-server, or None."""
    path = Path(os.environ.get("INFERACTORS_LLAMA_SERVER") or DEFAULT_LLAMA_SERVER)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def server_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants so far (0 when gone)."""
    try:
        root = psutil.Process(pid)
        total = 0.0
        for process in (root, *root.children(recursive=True)):
            times = process.cpu_times()
            total += float(times.user + times.system)
        return total
    except psutil.Error:
        return 0.0


async def one_side(who: str, round_number: int, program: Path, ws: Workspace, adopt: int) -> Idle:
    """Bring ``who`` up, measure one window, stop it."""
    model = ws.root / "models" / "tiny.gguf"
    run_as = ws.run_as or "-"
    args = [who, str(program), str(model), str(ws.registry), str(ws.directory("state"))]
    worker = await Child.start("_idle_worker.py", [*args, run_as, str(free_port()), str(adopt)])
    try:
        ready = await worker.answer(240)
        await trio.sleep(SETTLE_S)
        cpu0 = await worker.cpu_time_s()
        began, server0 = trio.current_time(), server_cpu_s(ready["server"])
        await trio.sleep(WINDOW_S)
        window = trio.current_time() - began
        cores = (await worker.cpu_time_s() - cpu0) / window
        server = (server_cpu_s(ready["server"]) - server0) / window
        rss = worker.rss_mib()
    finally:
        await worker.finish()
    return Idle(who, round_number, cores, rss, server)


async def measure(program: Path) -> list[Idle]:
    """`ROUNDS` rounds of the three sides, the order rotated each round."""
    results = []
    farm = await Child.start("_fake_farm.py", ["1"])
    try:
        adopt = (await farm.answer(60))["ports"][0]
        with workspace() as ws:
            for round_number in range(ROUNDS):
                shift = round_number % len(SIDES)
                for who in SIDES[shift:] + SIDES[:shift]:
                    idle = await one_side(who, round_number, program, ws, adopt)
                    print(f"  round {round_number} {who}: {idle.cores:.4f} core", flush=True)
                    results.append(idle)
    finally:
        await farm.finish()
    return results


def report(results: list[Idle]) -> None:
    rows = [
        [
            LABELS[r.who],
            str(r.round_number),
            f"{r.cores:.4f}",
            f"{r.rss_mib:.0f}",
            f"{r.server_cores:.4f}",
        ]
        for r in results
    ]

    def median(who: str, field: str) -> float:
        return float(statistics.median(getattr(r, field) for r in results if r.who == who))

    ours, floor, prober = (median(who, "cores") for who in SIDES)
    mem, floor_mem = median("product", "rss_mib"), median("floor", "rss_mib")
    tick = 0.0001  # under this, a base is too small for a ratio to mean anything

    def times(base: float, key: str) -> str:
        if base < tick:
            return f"{key} {base:.5f} (too small for a ratio)"
        return f"{ours / base:.2f}x {key} ({base:.4f})"

    summary("idle", product=ours, floor=floor, prober=prober, rss=mem, floor_rss=floor_mem)
    over = ours / prober if prober >= tick else None
    notes = [
        f"product {ours:.4f} core (median of {ROUNDS}) = {times(floor, 'B1')}, "
        f"{times(prober, 'B2')}; target <= {TARGET_CORES} core: {verdict(ours, TARGET_CORES)}; "
        f"target <= {TARGET_OVER_PROBER}x B2: {verdict(over, TARGET_OVER_PROBER)}",
        f"product RSS {mem:.0f} MiB = {mem / floor_mem:.2f}x B1 ({floor_mem:.0f} MiB)",
        f"window {WINDOW_S:g} s from {SETTLE_S:g} s after ready; {load_note()} at the end.",
        "CPU is the process's own (time.process_time, read by it at the window's ends: every "
        "thread, microsecond-exact; asking wakes it once); the server's CPU "
        "(last column) is not counted: it shows what the probes cost the server.",
    ]
    header = ("side", "round", "CPU core", "RSS MiB", "llama-server core")
    print_grid("Idle: one managed llama-server + one adopted server", header, rows, notes)


async def main() -> None:
    print_context("bench_idle")
    program = llama_server()
    if program is None:
        print(
            "SKIPPED: no real llama-server (set INFERACTORS_LLAMA_SERVER, or run "
            f"`inferactors llama-server`; looked for {DEFAULT_LLAMA_SERVER})"
        )
        return
    print(f"llama-server {program}, window {WINDOW_S:g} s, {ROUNDS} round(s)")
    report(await measure(program))


if __name__ == "__main__":
    trio.run(main)
