"""Adopted servers: the cost of watching N, as a curve over N (issues 11 and 16).

The servers are fakes on loopback that answer at once: one separate process serving N
ports (``_fake_farm.py``, trio + h11; its CPU is printed, never counted). Against them, each
in its own process (``_adopted_worker.py``), in the same run and interleaved (the order
flips every round; each round has its own seed):

* product: a runtime adopting the N servers (``InferConfig.adopted``), probing each at its
  default interval (1 s);
* bare, h11, raw: keep-alive probers making the same requests (``GET /health`` and ``GET
  /v1/models``) at the same rate, from random phases (``_bare_probers.py``): trio + httpx;
  trio + h11 (the floor of a client that frames with a library); pre-built bytes on a trio
  socket (the floor of any client).

Columns, over a window that starts 1 s after every server was admitted:

* CPU: the process's own CPU time over the window / the window (cores; psutil, outside);
* RSS: its resident set at the window's end, MiB;
* admitted: servers Running (product: its StateChanged event arrived; bare: both GETs
  answered 200) / N, and the seconds from the first ``load`` until the last (or until the
  admission timeout);
* probe Hz: ``GET /health`` requests per second per server, from the fake's own count over
  the window (the intervals between a server's first and last request of the window when it
  had three or more, else its count / the window): the least-probed server, and the median;
* conn/s: connections the fake accepted per second (0 when every probe reuses one);
* req/s/srv: requests per second per server (all paths; a probe here is two GETs);
* CPU/probe: CPU time per probe (both GETs), ms: cores / (probes per second, all servers);
* left Running: instances that left Running in the window (product; a healthy server
  reported as anything else is a false verdict);
* lag p50/p99: how late a 10 ms ``trio.sleep`` wakes in that process (a task running the
  whole window);
* status all: the time for a status of all N, after the window (`runtime.statuses()` when
  the runtime has it, else N ``status()`` calls at once; bare: copying its table).

Targets at N = 1,000: at most 0.5 core and 150 MiB, all admitted within 10 s, every
server probed at 0.95 Hz or more, zero left Running, lag p99 under 5 ms, status of all
within 100 ms; CPU per probe at most 1.5x the h11 floor.

Settings (environment): ``BENCH_N`` (default ``1,10,100,300,1000``), ``BENCH_WHO``
(``product,bare,h11,raw``), ``BENCH_WINDOW_S`` (10),
``BENCH_ROUNDS`` (2), ``BENCH_SEED`` (3), ``BENCH_ADMIT_TIMEOUT_S`` (30),
``BENCH_ADMIT_CONCURRENCY`` (100). ``--quick``: N = 1 and 10, a 2 s window, one round.

Run: ``.venv/bin/python bench/bench_adopted.py`` (about 6 minutes; ``--quick`` about 30 s).
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import attrs
import trio
from _child import Child
from _common import (
    env_float,
    env_ints,
    load_note,
    print_context,
    print_grid,
    quick,
    summary,
    verdict,
)

N_LIST = env_ints("BENCH_N", (1, 10, 100, 300, 1000), (1, 10))
WHO = tuple(os.environ.get("BENCH_WHO", "product,bare,h11,raw").split(","))
WINDOW_S = env_float("BENCH_WINDOW_S", 10.0, 2.0)
ROUNDS = int(env_float("BENCH_ROUNDS", 2, 1))
SEED = int(os.environ.get("BENCH_SEED", "3"))
ADMIT_TIMEOUT_S = env_float("BENCH_ADMIT_TIMEOUT_S", 30.0)
CONCURRENCY = int(env_float("BENCH_ADMIT_CONCURRENCY", 100))
SETTLE_S = 1.0


@attrs.frozen
class Run:
    """One side's figures at one N in one round."""

    who: str
    n: int
    seed: int
    cores: float
    rss_mib: float
    admitted: int
    admit_s: float
    hz_min: float
    hz_median: float
    conn_per_s: float
    req_per_server_s: float
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    status_all_ms: float
    status_how: str
    left_running: int
    errors: int
    first_error: str
    farm_cores: float
    probes_per_s: float

    @property
    def cpu_per_probe_ms(self) -> float:
        """CPU time per probe (both GETs), ms."""
        return self.cores / max(self.probes_per_s, 1e-9) * 1e3


async def one_run(who: str, farm: Child, ports: list[int], seed: int) -> Run:
    """Start ``who``'s worker, wait for its admission, measure one window, ask its report."""
    args = [who, ",".join(map(str, ports)), str(seed), str(ADMIT_TIMEOUT_S), str(CONCURRENCY)]
    worker = await Child.start("_adopted_worker.py", args)
    try:
        admission = await worker.answer(ADMIT_TIMEOUT_S + 120)
        await trio.sleep(SETTLE_S)
        await farm.ask("start", 10)
        cpu0, farm0, began = worker.cpu_s(), farm.cpu_s(), trio.current_time()
        await trio.sleep(WINDOW_S)
        cpu1, farm1, ended = worker.cpu_s(), farm.cpu_s(), trio.current_time()
        rss = worker.rss_mib()
        counts = await farm.ask("stop", 10)
        status = await worker.ask("report", 300)
        tail = await worker.answer(60)
    finally:
        await worker.finish()
    window_s = ended - began
    cores = ((cpu1 - cpu0) / window_s, (farm1 - farm0) / window_s)
    return summarise(who, seed, admission, counts, status, tail, cores, rss)


def summarise(
    who: str,
    seed: int,
    admission: dict[str, Any],
    counts: dict[str, Any],
    status: dict[str, Any],
    tail: dict[str, Any],
    cores: tuple[float, float],
    rss_mib: float,
) -> Run:
    """One `Run` from the worker's and the fake's answers; ``cores``: the worker's and the
    fake's over the window."""
    rates = counts["hz"]
    lag = tail["lag_ms"]
    return Run(
        who,
        admission["n"],
        seed,
        cores[0],
        rss_mib,
        admission["admitted"],
        admission["admit_s"],
        min(rates),
        statistics.median(rates),
        counts["connections"] / counts["seconds"],
        counts["requests"] / counts["seconds"] / admission["n"],
        lag["p50"],
        lag["p99"],
        statistics.median(status["status_all_s"]) * 1e3,
        status["status_how"],
        tail["left_running"],
        tail["errors"],
        (tail["first_error"] or [""])[0],
        cores[1],
        sum(counts["health"]) / counts["seconds"],
    )


async def curve() -> list[Run]:
    """Every N, `ROUNDS` rounds each, product and bare interleaved."""
    runs = []
    for n in N_LIST:
        farm = await Child.start("_fake_farm.py", [str(n)])
        try:
            ports = (await farm.answer(120))["ports"]
            for round_number in range(ROUNDS):
                seed = SEED + round_number
                shift = round_number % len(WHO)
                order = WHO[shift:] + WHO[:shift]  # each side goes first in turn
                for who in order:
                    run = await one_run(who, farm, ports, seed)
                    print(f"  N={n} {who} seed {seed}: {show(run)}", flush=True)
                    runs.append(run)
        finally:
            await farm.finish()
    return runs


def show(run: Run) -> str:
    """One run on one line (printed as it finishes)."""
    lag = f"{fmt(run.lag_p50_ms, 2)}/{fmt(run.lag_p99_ms, 2)}"
    return (
        f"{run.cores:.3f} core, {run.rss_mib:.0f} MiB, {run.admitted}/{run.n} in "
        f"{run.admit_s:.2f} s, {run.hz_min:.2f}/{run.hz_median:.2f} Hz, "
        f"{run.cpu_per_probe_ms:.3f} ms CPU/probe, lag {lag} ms, "
        f"status all {run.status_all_ms:.1f} ms, fake {run.farm_cores:.2f} core"
    )


def fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def row(run: Run) -> list[str]:
    return [
        f"{run.n}",
        run.who,
        str(run.seed),
        f"{run.cores:.3f}",
        f"{run.rss_mib:.0f}",
        f"{run.admitted}/{run.n} {run.admit_s:.2f}s",
        f"{run.hz_min:.2f}",
        f"{run.hz_median:.2f}",
        f"{run.conn_per_s:.1f}",
        f"{run.req_per_server_s:.2f}",
        f"{run.cpu_per_probe_ms:.3f}",
        fmt(run.lag_p50_ms, 2),
        fmt(run.lag_p99_ms, 2),
        f"{run.status_all_ms:.2f}",
        str(run.left_running),
        f"{run.farm_cores:.2f}",
    ]


HEADER = (
    "N",
    "who",
    "seed",
    "CPU core",
    "RSS MiB",
    "admitted",
    "Hz min",
    "Hz med",
    "conn/s",
    "req/s/srv",
    "CPU/probe ms",
    "lag p50",
    "lag p99",
    "status all ms",
    "left Running",
    "fake core",
)


def median_of(runs: list[Run], who: str, field: str) -> float | None:
    values = [getattr(r, field) for r in runs if r.who == who and getattr(r, field) is not None]
    return statistics.median(values) if values else None


def ratio_lines(runs: list[Run]) -> list[str]:
    """Per N: the product's CPU per probe and CPU against each baseline, medians over the
    rounds."""
    lines = []
    for n in N_LIST:
        at_n = [r for r in runs if r.n == n]
        ours = median_of(at_n, "product", "cores")
        per = median_of(at_n, "product", "cpu_per_probe_ms")
        if ours is None or per is None:
            continue
        parts = [f"N={n}: product {ours:.3f} core, {per:.3f} ms CPU/probe"]
        for who in WHO[1:]:
            base, base_per = median_of(at_n, who, "cores"), median_of(at_n, who, "cpu_per_probe_ms")
            if base is not None and base_per is not None:
                parts.append(
                    f"{who} {base:.3f} core ({ours / max(base, 1e-6):.2f}x), "
                    f"{base_per:.3f} ms/probe ({per / max(base_per, 1e-9):.2f}x)"
                )
        lines.append("; ".join(parts))
    return lines


def target_lines(runs: list[Run]) -> list[str]:
    """The targets at the largest N measured (they are set for N = 1,000)."""
    top = max(N_LIST)
    ours = [r for r in runs if r.n == top and r.who == "product"]
    if not ours:
        return []

    def worst(field: str, high: bool = True) -> float | None:
        values = [getattr(r, field) for r in ours if getattr(r, field) is not None]
        return (max(values) if high else min(values)) if values else None

    admitted_all = all(r.admitted == r.n for r in ours)
    admit_s = worst("admit_s") if admitted_all else None
    floor = [r.cpu_per_probe_ms for r in runs if r.n == top and r.who == "h11"]
    per_probe = worst("cpu_per_probe_ms")
    over_floor = None if not floor or per_probe is None else per_probe / min(floor)
    checks = [
        ("CPU", worst("cores"), 0.5, "core", False),
        ("CPU per probe / h11 floor", over_floor, 1.5, "x", False),
        ("left Running (false verdicts)", worst("left_running"), 0.0, "", False),
        ("RSS", worst("rss_mib"), 150.0, "MiB", False),
        ("all admitted in", admit_s, 10.0, "s", False),
        ("least-probed server", worst("hz_min", high=False), 0.95, "Hz", True),
        ("lag p99", worst("lag_p99_ms"), 5.0, "ms", False),
        ("status of all", worst("status_all_ms"), 100.0, "ms", False),
    ]
    scope = "" if top == 1000 else f" (targets are set for N=1000; this run's largest N is {top})"
    lines = [f"targets, worst product round at N={top}{scope}:"]
    for name, value, limit, unit, at_least in checks:
        shown = "not all admitted" if value is None else f"{value:.3f} {unit}"
        sign = ">=" if at_least else "<="
        lines.append(
            f"  {name}: {shown} (target {sign} {limit:g} {unit}): "
            f"{verdict(value, limit, at_least=at_least)}"
        )
    return lines


def limits(runs: list[Run]) -> list[str]:
    """What limited the figures."""
    lines = [load_note() + " at the end (other work shares these cores)."]
    fake = max(r.farm_cores for r in runs)
    lines.append(
        f"the fake farm (one process, not counted) used up to {fake:.2f} core of the 2; "
        "it competes with the process measured."
    )
    how = {r.status_how for r in runs if r.who == "product"}
    lines.append(f"product status of all: {', '.join(sorted(how))}.")
    for r in runs:
        if r.errors:
            lines.append(f"N={r.n} {r.who}: {r.errors} load/start errors, e.g. {r.first_error}")
    return lines


async def main() -> None:
    print_context("bench_adopted", SEED)
    print(
        f"N {N_LIST}, window {WINDOW_S:g} s, {ROUNDS} round(s), admission timeout "
        f"{ADMIT_TIMEOUT_S:g} s, {CONCURRENCY} loads at once{' (quick)' if quick() else ''}"
    )
    runs = await curve()
    summary(
        "adopted", runs=[attrs.asdict(r) | {"cpu_per_probe_ms": r.cpu_per_probe_ms} for r in runs]
    )
    print_grid(
        "Adopted servers: product (runtime, adopted) vs bare keep-alive prober, per N and round",
        HEADER,
        [row(r) for r in runs],
        [*ratio_lines(runs), *target_lines(runs), *limits(runs)],
    )


if __name__ == "__main__":
    trio.run(main)
