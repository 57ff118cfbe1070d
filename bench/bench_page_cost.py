"""What the web page, the usage readings and a stop's group polls cost, before and after
their costs were made to grow with the work (one run, side by side, interleaved):

* group poll: one `group_alive` of a stopping server's group (a shell whose child stays in
  its group), the old way (`SystemProcessTable.live_members`: every process on the host)
  and the new (`group_members.group_alive`: the leader's tree; once the leader exited,
  this subreaper's children of its session), leader alive and leader exited;
* tree reading: one reading of that tree's memory and CPU, the old way (psutil
  ``children(recursive=True)``: the parent of every process on the host) and the new
  (`tree_usage`: the kernel's children lists);
* views: the scheduler's residency read per instance (old ``Fleet.views``: N reads of N
  slots) against once (new), with N slots built as the scheduler builds them;
* page change: one instance of N changes while K pages are open: the old way (each page
  makes and JSON-serialises every row to diff) against the new (`RowTable`: one refresh
  compares frozen views, makes the one row, and each page reads what changed).

Figures: the median of ``BENCH_ROUNDS`` rounds (each the mean of many calls), in
microseconds, and old / new as a ratio. Settings: ``BENCH_N`` (200 instances), ``BENCH_K``
(5 pages), ``BENCH_ROUNDS`` (7). ``--quick``: 3 rounds.
Run: ``.venv/bin/python bench/bench_page_cost.py`` (about 20 s).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import psutil

from inferactors._actors.front_door_msgs import ResidencyView
from inferactors._actors.front_door_seam import Residency
from inferactors._edges.group_members import group_alive
from inferactors._edges.proctable import SystemProcessTable
from inferactors._edges.subreaper import become_subreaper
from inferactors._edges.tree_usage import TreeUsage, tree_usage
from inferactors._service.ui_history import UiHistory
from inferactors._service.ui_rows import row
from inferactors._service.ui_table import RowTable
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState, InstanceStatus

QUICK = "--quick" in sys.argv
N = int(os.environ.get("BENCH_N", 200))
K = int(os.environ.get("BENCH_K", 5))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3 if QUICK else 7))


def _per_call_us(job: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        job()
    return (time.perf_counter() - started) / calls * 1e6


def _side_by_side(
    old: Callable[[], object], new: Callable[[], object], calls: int
) -> tuple[float, float]:
    olds: list[float] = []
    news: list[float] = []
    for index in range(ROUNDS):
        pair = [(olds, old), (news, new)] if index % 2 == 0 else [(news, new), (olds, old)]
        for into, job in pair:
            into.append(_per_call_us(job, calls))
    return statistics.median(olds), statistics.median(news)


def _old_tree_usage(pid: int) -> TreeUsage | None:
    """The reader before: psutil's ``children(recursive=True)``."""
    try:
        leader = psutil.Process(pid)
        tree = [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return None
    rss, cpu = 0, 0.0
    for process in tree:
        try:
            with process.oneshot():
                rss += process.memory_info().rss
                times = process.cpu_times()
                cpu += times.user + times.system
        except psutil.Error:
            continue
    return TreeUsage(rss, cpu)


def _wrapper(where: Path, end: str) -> tuple[subprocess.Popen[bytes], int]:
    script = f"sleep 600 & echo $! > member; {end}"
    leader = subprocess.Popen(["/bin/sh", "-c", script], cwd=where, start_new_session=True)
    member = where / "member"
    while not member.exists() or not member.read_text().endswith("\n"):
        time.sleep(0.01)
    return leader, int(member.read_text())


def _group_and_tree(rows: list[tuple[str, float, float]]) -> None:
    become_subreaper()  # as ``inferactors run`` is
    table = SystemProcessTable()
    with tempfile.TemporaryDirectory() as where:
        leader, member = _wrapper(Path(where), "wait")
        try:
            old, new = _side_by_side(
                lambda: table.live_members(leader.pid), lambda: group_alive(leader.pid, None), 200
            )
            rows.append(("group poll, leader alive", old, new))
            old, new = _side_by_side(
                lambda: _old_tree_usage(leader.pid), lambda: tree_usage(leader.pid), 100
            )
            rows.append(("tree reading (RSS + CPU)", old, new))
        finally:
            os.kill(member, 9)
            leader.wait()
    with tempfile.TemporaryDirectory() as where:
        leader, member = _wrapper(Path(where), "exit 0")
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # a zombie, as in a stop
        try:
            old, new = _side_by_side(
                lambda: table.live_members(leader.pid), lambda: group_alive(leader.pid, None), 200
            )
            rows.append(("group poll, leader exited", old, new))
        finally:
            os.kill(member, 9)
            os.waitpid(member, 0)
            leader.wait()


def _residency(names: list[str]) -> dict[str, ResidencyView]:
    """N slots' figures, made as the scheduler makes them (one view per slot)."""
    return {
        name: ResidencyView(Residency.RESIDENT, True, 1 << 30, 0, None, 0, 0, 0, None)
        for name in names
    }


def _views(rows: list[tuple[str, float, float]]) -> None:
    names = [f"i{n:03}" for n in range(N)]

    def old() -> list[ResidencyView | None]:
        return [_residency(names).get(name) for name in names]

    def new() -> list[ResidencyView | None]:
        every = _residency(names)
        return [every.get(name) for name in names]

    rows.append((f"views, {N} scheduled", *_side_by_side(old, new, 5)))


@attrs.define(eq=False)
class _Source:
    instances: list[InstanceView]
    history: UiHistory
    changes: int = 0

    def views(self) -> tuple[InstanceView, ...]:
        return tuple(self.instances)


def _old_key(data: dict[str, Any]) -> str:
    """The diff before: each row as JSON without its uptimes."""
    still = {k: v for k, v in data.items() if k != "uptime_s"}
    still["status"] = {k: v for k, v in still["status"].items() if k != "uptime_s"}
    return json.dumps(still, sort_keys=True, separators=(",", ":"))


def _page(rows: list[tuple[str, float, float]]) -> None:
    history = UiHistory()

    def view(n: int, restarts: int) -> InstanceView:
        status = InstanceStatus(
            InstanceState.RUNNING, "server up", pid=1000 + n, uptime_s=float(n), restarts=restarts
        )
        return InstanceView(
            f"i{n:03}", "infer.llamacpp", "managed", f"id-{n}", status,
            endpoint=f"http://127.0.0.1:{9000 + n}", model="tiny",
        )  # fmt: skip

    source = _Source([view(n, 0) for n in range(N)], history)
    table = RowTable(source, lambda: None)
    table.table()
    kept = [{r["name"]: _old_key(r) for r in (row(v, history) for v in source.views())}] * K
    flip = [0]

    def change() -> None:
        flip[0] += 1
        source.instances[7] = view(7, flip[0])
        source.changes += 1

    def old() -> None:
        change()
        for page in kept:  # every page makes every row and diffs it
            fresh = [row(v, history) for v in source.views()]
            sent = [r for r in fresh if page.get(r["name"]) != _old_key(r)]
            page.update({r["name"]: _old_key(r) for r in sent})

    seen = [table.version] * K

    def new() -> None:
        change()
        for index in range(K):  # every page: the first refreshes, all read what changed
            table.refresh()
            table.changes_since(seen[index])
            seen[index] = table.version

    rows.append((f"page change, {N} rows x {K} pages", *_side_by_side(old, new, 5)))


def main() -> None:
    rows: list[tuple[str, float, float]] = []
    print(f"host processes: {len(psutil.pids())}; N = {N}, K = {K}, {ROUNDS} rounds")
    _group_and_tree(rows)
    _views(rows)
    _page(rows)
    print(f"{'figure':38} {'old us':>10} {'new us':>10} {'old/new':>8}")
    for name, old, new in rows:
        print(f"{name:38} {old:10.1f} {new:10.1f} {old / new:8.1f}")
    print(f"load average: {os.getloadavg()[0]:.2f} (other work on this machine shares it)")


if __name__ == "__main__":
    main()
