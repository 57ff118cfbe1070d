"""Issue 16's figures side by side, in one run: every cost script in turn, then one summary.

Runs, each in its own process and printing its own tables as it goes:
``bench_adopted.py`` (N = 1, 10, 100, 300, 1,000 adopted: the product beside bare httpx,
h11 and raw-socket probers), ``bench_managed50.py`` (50 managed started at once: Running,
false verdicts, the loop's lag beside bare loops, an exposure under the start),
``bench_idle.py`` (one managed llama-server + one adopted server beside a bare 1 Hz
prober) and ``bench_readiness_servers.py`` (readiness on an ``http.server`` fake and the
real mlx_lm.server). Each appends its key figures to a summary file (``_common.summary``);
this prints them as the markdown tables ``design/cost.md`` and the README show.

Settings: every script's own (``BENCH_N``, ``BENCH_WINDOW_S``, ...); ``--quick`` is passed
on. Run: ``.venv/bin/python bench/bench_cost.py`` (about 40 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _common import load_note, quick

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "bench_adopted.py",
    "bench_managed50.py",
    "bench_idle.py",
    "bench_readiness_servers.py",
)
WHO = ("product", "bare", "h11", "raw")


def run_all(summary: Path) -> None:
    env = {**os.environ, "BENCH_SUMMARY": str(summary)}
    extra = ["--quick"] if quick() else []
    for script in SCRIPTS:
        print(f"\n===== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *extra], env=env, check=False)


def read(summary: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    if summary.exists():
        for line in summary.read_text().splitlines():
            entry = json.loads(line)
            found.setdefault(entry.pop("script"), []).append(entry)
    return found


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def adopted_table(entries: list[dict[str, Any]]) -> list[str]:
    runs = [run for entry in entries for run in entry["runs"]]

    def med(n: int, who: str, field: str) -> float | None:
        values = [
            r[field] for r in runs if r["n"] == n and r["who"] == who and r[field] is not None
        ]
        return statistics.median(values) if values else None

    rows = []
    for n in sorted({r["n"] for r in runs}):
        ours = [r for r in runs if r["n"] == n and r["who"] == "product"]
        cores = {who: med(n, who, "cores") for who in WHO}
        per = {who: med(n, who, "cpu_per_probe_ms") for who in WHO}
        if not ours or cores["product"] is None:
            continue
        ratio = [f"{cores['product'] / c:.2f}x" if c else "-" for c in (cores[w] for w in WHO[1:])]
        admitted = min(r["admitted"] for r in ours)
        admit_s = max(r["admit_s"] for r in ours)
        rows.append(
            [
                f"{n:,}",
                *(f"{cores[w]:.3f}" if cores[w] is not None else "-" for w in WHO),
                *ratio,
                "/".join(f"{per[w]:.2f}" if per[w] is not None else "-" for w in WHO),
                f"{min(r['hz_min'] for r in ours):.2f}",
                f"{admitted} in {admit_s:.1f} s",
                str(max(r["left_running"] for r in ours)),
            ]
        )
    header = (
        "servers", "product core", "httpx core", "h11 core", "raw core",
        "vs httpx", "vs h11", "vs raw", "CPU ms/probe (product/httpx/h11/raw)",
        "least-probed Hz", "admitted", "left Running",
    )  # fmt: skip
    return table(header, rows)


def managed_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines = []
    for entry in entries:
        start = entry["start"]
        lag, bare, floor = start["lag_ms"], entry["bare_lag"], entry["floor_lag"]
        worst = {**lag, "max": start["lag_max_ms"]}
        rows = [
            [who, *(f"{figures[key]:.1f}" for key in ("p50", "p99", "max"))]
            for who, figures in (
                ("product", worst),
                ("bare loop, same spawns", bare),
                ("bare loop, idle", floor),
            )
        ]
        lines += table(("loop lag, ms", "p50", "p99", "max"), rows)
        lines.append("")
        lines.append(
            f"{start['running']}/{entry['servers']} Running in {start['took_s']:.1f} s; "
            f"false verdicts: {start['exits']} exits, {start['departures']} left Running; "
            f"an exposure under the start stopped {start['exposure_s'] * 1e3:.0f} ms after "
            f"its bind; then {entry['cores']:.3f} core with all running; exposure "
            f"{statistics.median(entry['exposure_ms']):.0f} ms median; one LISTEN dump: raw "
            f"{entry['dump_us']['raw']:.0f} us, pyroute2 {entry['dump_us']['pyroute2']:.0f} "
            f"us, psutil {entry['dump_us']['psutil']:.0f} us."
        )
    return lines


def idle_lines(entries: list[dict[str, Any]]) -> list[str]:
    return [
        f"idle (one managed llama-server + one adopted): product {e['product']:.4f} core, "
        f"bare 1 Hz prober {e['prober']:.4f} core = {e['product'] / max(e['prober'], 1e-9):.2f}x"
        for e in entries
    ]


def readiness_lines(entries: list[dict[str, Any]]) -> list[str]:
    rows = [
        [e["server"], f"{e['line_to_running'] * 1e3:.0f}", f"{e['bare'] * 1e3:.0f}"]
        for e in entries
    ]
    return table(("server", "ready line -> Running ms", "bare 3 round trips ms"), rows)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        summary = Path(scratch) / "summary.jsonl"
        run_all(summary)
        found = read(summary)
    print("\n===== summary (markdown)\n")
    for lines in (
        adopted_table(found.get("adopted", [])),
        managed_lines(found.get("managed50", [])),
        idle_lines(found.get("idle", [])),
        readiness_lines(found.get("readiness", [])),
    ):
        print("\n".join(lines) + "\n")
    print(load_note())


if __name__ == "__main__":
    main()
