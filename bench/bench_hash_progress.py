"""What hashing progress costs (issue 19 item 4): BLAKE3 of a model file with and without
the progress callbacks, side by side in the same run, interleaved sample by sample.

- B1: ``blake3_file(path)``, no callback (the baseline).
- F1: the same with the CLI's `HashProgress` (``models add``/``verify``), writing to a pipe
  (``os.devnull``: the pacing and the line, not a terminal's speed).
- F2: the same with the actor's `HashWatch` (the re-hash at spawn: the worker thread stores
  the latest numbers; the trio task that samples them runs once a second, not measured).

The whole-hash timings are noisy on a shared machine (other work steals the cores), so the
table also gives each callback's own cost (100,000 calls, timed alone) and what it adds to
the fastest baseline hash: ``calls x cost / min(B1)`` (a 4 MiB chunk is one call).

The file: ``BENCH_HASH_MIB`` MiB (default 1024) of random bytes under /tmp, read from the
page cache after a first warm-up pass; deleted afterwards. Target: each ratio under 1.01.

    .venv/bin/python bench/bench_hash_progress.py [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import MS, Row, Summary, print_context, print_table, quick

from inferactors._actors.instance.progress import HashWatch
from inferactors._cli.models_common import HashProgress
from inferactors._models.hashing import ProgressFn, blake3_file


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        for _ in range(size // (16 << 20)):
            handle.write(os.urandom(16 << 20))


def timed(path: Path, on_progress: ProgressFn | None) -> float:
    began = time.perf_counter()
    blake3_file(path, on_progress=on_progress)
    return time.perf_counter() - began


def per_call(callback: ProgressFn, calls: int = 100_000) -> float:
    path, total = Path("/m/model.gguf"), 6 << 30
    began = time.perf_counter()
    for n in range(calls):
        callback(path, n * (4 << 20) % total, total)
    return (time.perf_counter() - began) / calls


def main() -> None:
    print_context("bench_hash_progress")
    mib = int(os.environ.get("BENCH_HASH_MIB", "256" if quick() else "1024"))
    samples = 3 if quick() else 9
    with tempfile.TemporaryDirectory() as scratch, open(os.devnull, "w") as pipe:
        path = Path(scratch) / "model.gguf"
        write_random(path, mib << 20)
        timed(path, None)  # warm the page cache
        seconds: dict[str, list[float]] = {"B1": [], "F1": [], "F2": []}
        for _ in range(samples):
            seconds["B1"].append(timed(path, None))
            seconds["F1"].append(timed(path, HashProgress(stream=pipe)))
            seconds["F2"].append(timed(path, HashWatch()))
    rows = [
        Row("no progress callback", Summary.of(seconds["B1"]), key="B1"),
        Row("CLI HashProgress (to a pipe)", Summary.of(seconds["F1"]), baseline="B1"),
        Row("actor HashWatch (re-hash at spawn)", Summary.of(seconds["F2"]), baseline="B1"),
    ]
    rate = mib / Summary.of(seconds["B1"]).median / 1024
    notes = [f"{mib} MiB file, page cache warm; baseline {rate:.2f} GiB/s; target: ratio < 1.01"]
    calls, fastest = mib // 4, min(seconds["B1"])
    with open(os.devnull, "w") as pipe:
        costs = {"F1": per_call(HashProgress(stream=pipe)), "F2": per_call(HashWatch())}
    for key, cost in costs.items():
        added = calls * cost / fastest
        notes.append(
            f"{key}: {cost * 1e6:.2f} µs a call, {calls} calls: +{added * 100:.3f} % of the "
            f"fastest B1 ({fastest * 1e3:.0f} ms)"
        )
    print_table(f"BLAKE3 of {mib} MiB with and without progress", rows, MS, notes)


if __name__ == "__main__":
    main()
