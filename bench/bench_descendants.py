"""Idle cost of tracking what servers start (``_edges/descendants.py``): the supervisor's
CPU while N idle servers, each with a child of its own, run under `ManagedProcess`.

Sides, each its own process, interleaved (the order rotates every round):

* floor: trio spawns the same N servers (``trio.lowlevel.open_process``, a session each)
  and only waits on them: no look at their descendants;
* cgroup: `ManagedProcess` with a cgroup per server (made under a cgroup the bench makes;
  the side is skipped, saying why, where this process may make none): no timer, nothing
  read while they idle;
* no cgroup: `ManagedProcess` without one: a look about every second per server
  (``descendant_looks.py``; a walk of its tree).

Figures: the process's own CPU time over a window that starts 1 s after the N servers
run, divided by the window (cores), and each side against the no-cgroup side (the timer)
as a ratio; and one `Descendants.track` per server, in microseconds, with and without a
cgroup.

Settings: ``BENCH_SERVERS`` (20), ``BENCH_WINDOW_S`` (10), ``BENCH_ROUNDS`` (2).
``--quick``: 5 servers, a 3 s window, one round.
Run: ``.venv/bin/python bench/bench_descendants.py`` (about a minute).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import attrs
import psutil
import trio

QUICK = "--quick" in sys.argv
SERVERS = int(os.environ.get("BENCH_SERVERS", 5 if QUICK else 20))
WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", 3 if QUICK else 10))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 1 if QUICK else 2))
SIDES = ("floor", "cgroup", "no cgroup")
SERVER = ["/bin/sh", "-c", "sleep 600 & exec sleep 600"]
"""An idle server with a child of its own (the child in its group)."""


@attrs.frozen
class _Launch:
    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


async def _worker(side: str, base: str) -> None:
    from inferactors._edges.cgroups import CgroupTree
    from inferactors._edges.process import ManagedProcess, open_child_process

    tree = CgroupTree.at(Path(base)) if side == "cgroup" else None
    cwd = Path("/tmp")
    async with trio.open_nursery() as nursery:
        processes: list[object] = []
        for _ in range(SERVERS):
            if side == "floor":
                processes.append(await trio.lowlevel.open_process(SERVER, start_new_session=True))
                continue
            launch = _Launch(Path(SERVER[0]), tuple(SERVER[1:]), cwd)
            opener = functools.partial(open_child_process, cgroups=lambda: tree)
            processes.append(await ManagedProcess.spawn(nursery, launch, open_process=opener))
        await trio.sleep(1.0)
        me = psutil.Process()
        before, started = me.cpu_times(), time.monotonic()
        await trio.sleep(WINDOW_S)
        after, window = me.cpu_times(), time.monotonic() - started
        used = (after.user + after.system) - (before.user + before.system)
        track_us = _track_cost(processes) if side != "floor" else None
        print(json.dumps({"cores": used / window, "track_us": track_us}), flush=True)
        for process in processes:
            if isinstance(process, trio.Process):
                os.killpg(process.pid, signal.SIGKILL)  # its child too (same group)
                await process.wait()
            else:
                await process.terminate(0.0)  # type: ignore[attr-defined]
        nursery.cancel_scope.cancel()


def _track_cost(processes: list[object]) -> float:
    rounds = 20
    started = time.perf_counter()
    for _ in range(rounds):
        for process in processes:
            process._descendants.track()  # type: ignore[attr-defined]
    return (time.perf_counter() - started) / rounds / len(processes) * 1e6


def _base_cgroup() -> Path | str:
    from inferactors._edges.cgroups import cgroup2_mount

    mount = cgroup2_mount()
    if mount is None:
        return "cgroup v2 is not mounted"
    path = mount / f"inferactors-bench-{uuid.uuid4().hex[:10]}"
    try:
        path.mkdir()
    except OSError as error:
        return f"this process may not make a cgroup under {mount} ({error})"
    return path


def _remove(base: Path) -> None:
    for child in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            child.rmdir()
    base.rmdir()


def main() -> None:
    base = _base_cgroup()
    sides = [s for s in SIDES if s != "cgroup" or isinstance(base, Path)]
    print(f"bench_descendants: {SERVERS} idle servers, window {WINDOW_S:g} s, {ROUNDS} rounds")
    if not isinstance(base, Path):
        print(f"  the cgroup side is skipped: {base}")
    results: dict[str, list[dict[str, float | None]]] = {side: [] for side in sides}
    try:
        for round_ in range(ROUNDS):
            order = sides[round_ % len(sides) :] + sides[: round_ % len(sides)]
            for side in order:
                argv = [sys.executable, __file__, "--worker", side, str(base)]
                argv += ["--quick"] if QUICK else []
                out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                results[side].append(json.loads(out.splitlines()[-1]))
    finally:
        if isinstance(base, Path):
            _remove(base)
    timer = statistics.median(r["cores"] or 0.0 for r in results["no cgroup"])
    print(f"  {'side':<10} {'cores':>9} {'x no cgroup':>12} {'track/server':>13}")
    for side in sides:
        cores = statistics.median(r["cores"] or 0.0 for r in results[side])
        tracks = [r["track_us"] for r in results[side] if r["track_us"] is not None]
        track = f"{statistics.median(tracks):.0f} us" if tracks else "-"
        ratio = f"{cores / timer:.2f}x" if timer > 0 else "-"
        print(f"  {side:<10} {cores:>9.5f} {ratio:>12} {track:>13}")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        where = sys.argv.index("--worker")
        trio.run(_worker, sys.argv[where + 1], sys.argv[where + 2])
    else:
        main()
