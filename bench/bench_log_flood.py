"""What a server that floods its output costs the supervisor (issue 18 item 2).

One managed fake llama-server per scenario, each scenario in a fresh process (so its RSS is
its own), the supervisor's runtime in that process:

- ``quiet``: the fake as it is (the baseline, B1);
- ``burst``: 7 MB of 120-byte lines on stderr before it listens;
- ``long``: 200 KiB lines at 20 MB/s for ever, once listening;
- ``flood``: 100-byte lines as fast as the pipe takes them (asked: 200 MB/s), for ever.

Figures, each over a window of ``BENCH_WINDOW_S`` (default 5 s) from the spawn:

- ready: spawn -> Running (the ratio to ``quiet`` is what a flood adds to readiness);
- loop lag: how late a 1 ms ``trio.sleep`` wakes, its p99 and its worst (every other
  instance of the supervisor waits that long);
- tail: a ``logs -n 100`` (`InferRuntime.logs` after one checkpoint: the wait for the loop
  plus the tail), its median and worst over 20 asks;
- RSS growth of the supervisor's process over the window;
- the server's writes that waited on a full pipe for over 50 ms, and the longest wait (its
  own clock, ``--flood-stats``).

Before the bounds (issue 18's report, a real llama-server's flood): RSS +696 MiB, 305 blocked
writes (up to 0.6 s), ``logs -n 100`` 257 ms, a 7 MB burst delaying the loop ~600 ms.

    .venv/bin/python bench/bench_log_flood.py [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import psutil
import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import (
    chat_spec,
    env_float,
    free_port,
    load_note,
    print_context,
    print_grid,
    workspace,
)

from inferactors import InstanceState, open_runtime
from inferactors.testing import FakeServerFaults, write_fake_server_program

SCENARIOS = {
    "quiet": FakeServerFaults(),
    "burst": FakeServerFaults(flood_start_bytes=7_000_000, flood_line_bytes=120),
    "long": FakeServerFaults(flood_bytes_per_s=20e6, flood_line_bytes=200 * 1024),
    "flood": FakeServerFaults(flood_bytes_per_s=200e6, flood_line_bytes=100),
}
TAILS = 20


async def _ticks(lags: list[float]) -> None:
    while True:
        began = trio.current_time()
        await trio.sleep(0.001)
        lags.append(trio.current_time() - began - 0.001)


async def _tails(runtime: object, handle: object, window_s: float, out: list[float]) -> None:
    for _ in range(TAILS):
        await trio.sleep(window_s / (TAILS + 1))
        began = trio.current_time()
        await trio.lowlevel.checkpoint()
        lines = runtime.logs(handle, 100)  # type: ignore[attr-defined]
        out.append(trio.current_time() - began)
        assert len(lines) <= 100


async def _scenario(name: str, window_s: float) -> dict[str, float | int | None]:
    me = psutil.Process()
    with workspace() as place:
        stats_dir = place.directory("stats")
        stats_dir.chmod(0o777)
        stats = stats_dir / "flood.json"
        program = write_fake_server_program(
            place.directory("bin") / "fake-llama-server",
            faults=SCENARIOS[name],
            python=place.python,
            sys_path=place.sys_path,
            flood_stats=stats,
        )
        rss_before = me.memory_info().rss
        rss_most = rss_before
        lags: list[float] = []
        tails: list[float] = []
        ready_s: float | None = None
        async with open_runtime(place.config(program)) as runtime:
            handle = await runtime.load(chat_spec(free_port()))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_ticks, lags)
                nursery.start_soon(_tails, runtime, handle, window_s, tails)
                began = trio.current_time()
                await runtime.start(handle)
                while trio.current_time() - began < window_s:
                    status = runtime.status(handle)
                    if ready_s is None and status.state is InstanceState.RUNNING:
                        ready_s = trio.current_time() - began
                    rss_most = max(rss_most, me.memory_info().rss)
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        flood = json.loads(stats.read_text()) if stats.exists() else {}
    lags.sort()
    return {
        "ready_s": ready_s,
        "lag_p99_s": lags[int(len(lags) * 0.99)] if lags else None,
        "lag_max_s": lags[-1] if lags else None,
        "tail_median_s": statistics.median(tails) if tails else None,
        "tail_max_s": max(tails) if tails else None,
        "rss_growth_mib": (rss_most - rss_before) / 2**20,
        "blocked": flood.get("blocked", 0),
        "max_block_s": flood.get("max_block_s", 0.0),
        "written_mb": flood.get("written_bytes", 0) / 1e6,
    }


def _ms(value: object) -> str:
    return "-" if value is None else f"{float(value) * 1000:.1f}"  # type: ignore[arg-type]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--scenario":
        window_s = float(sys.argv[3])
        print(json.dumps(trio.run(_scenario, sys.argv[2], window_s)))
        return
    window_s = env_float("BENCH_WINDOW_S", 5.0, 3.0)
    print_context("bench_log_flood")
    results = {}
    for name in SCENARIOS:
        argv = [sys.executable, __file__, "--scenario", name, str(window_s)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=os.environ)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}")
            continue
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    quiet_ready = results.get("quiet", {}).get("ready_s")
    rows = []
    for name, r in results.items():
        ratio = ""
        if quiet_ready and r["ready_s"]:
            ratio = f"{r['ready_s'] / quiet_ready:.2f}x B1"
        rows.append(
            (
                name,
                _ms(r["ready_s"]),
                ratio,
                _ms(r["lag_p99_s"]),
                _ms(r["lag_max_s"]),
                _ms(r["tail_median_s"]),
                _ms(r["tail_max_s"]),
                f"{r['rss_growth_mib']:.1f}",
                f"{r['written_mb']:.0f}",
                str(r["blocked"]),
                _ms(r["max_block_s"]),
            )
        )
    header = (
        "scenario",
        "ready ms",
        "vs",
        "lag p99 ms",
        "lag max ms",
        "tail ms",
        "tail max",
        "RSS +MiB",
        "MB written",
        "blocked",
        "max block ms",
    )
    print_grid(
        f"A flooding server, {window_s:g} s window from its spawn (B1: quiet)",
        header,
        rows,
        [load_note(), "targets: tail max < 50 ms, lag max < 50 ms, RSS + < 64 MiB, blocked 0"],
    )


if __name__ == "__main__":
    main()
