"""50 managed servers started at once, then watched: the start, CPU, exposure (issues 11, 16).

The product runs in this process: a managed runtime running 50 fake llama-servers
(``inferactors.testing``, as ``nobody`` when root; the exposure watch is always on for a
managed server), all 50 started at once. The start: how many reached Running, the false
verdicts (a healthy server stopped or reported anything but Running: every ProcessExited
and every StateChanged away from Running, counted), and the loop's lag meanwhile (how late a
10 ms sleep wakes: p50, p99, max), while one more server in a second runtime of this process
binds 0.0.0.0 (a real exposure under the same load: bind -> ProcessExited). Baseline L1, in
the same run: a bare trio loop (this process, no runtime) while the same 50 fake programs
are spawned at once from a worker thread; L0 the same loop with nothing else to do.

Once all 50 are Running, the window: this process's CPU time over it / its
length (cores; every thread; the servers are other processes and not counted), and RSS.

Then, with the 50 still running, `SAMPLES` times: a second runtime of this process starts
one more fake that also listens on 0.0.0.0 (``--extra-port``), after a random 0 to 0.3 s
(``--bind-delay-s``), and the time from its bind (its pid file's modification time, written
right after it listens; as ``bench_exposure.py``) to its ProcessExited (reason exposure)
arriving here is one sample.

Baselines for exposure, in the same run (three queries after each sample, the 50 still
running): what one kernel query costs, i.e. how soon a
watcher that asked the kernel right after the bind would know: B0 one raw netlink
sock_diag dump of the LISTEN sockets (``_edges/sock_diag.py``, what the product uses); B1 the
same through pyroute2 (what it used before); B2 one ``psutil.net_connections("tcp")`` (the
whole table through /proc).

Targets: 50 of 50 Running, zero false verdicts, loop lag p99 under 50 ms while they start,
the exposure under the start stopped within 250 ms; at most 0.3 core with 50 running;
bind -> stopped within 250 ms.
Settings: ``BENCH_SERVERS`` (50), ``BENCH_WINDOW_S`` (10), ``BENCH_SAMPLES`` (8).
``--quick``: 5 servers, a 2 s window, 2 samples. Run: ``.venv/bin/python
bench/bench_managed50.py`` (about 1 minute).
"""

from __future__ import annotations

import importlib
import os
import random
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path
from statistics import median

import attrs
import psutil
import trio
from _child import MIB, Overshoot
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
    print_grid,
    print_table,
    summary,
    verdict,
    workspace,
)
from bench_exposure import PID_FILE, written_at

from inferactors import (
    Event,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    ServeArgs,
    StateChanged,
    StopReason,
    open_runtime,
)
from inferactors._edges.sock_diag import SockDiag
from inferactors.testing import FakeServerFaults

SERVERS = int(env_float("BENCH_SERVERS", 50, 5))
WINDOW_S = env_float("BENCH_WINDOW_S", 10.0, 2.0)
SAMPLES = int(env_float("BENCH_SAMPLES", 8, 2))
SEED = int(os.environ.get("BENCH_SEED", "3"))
SETTLE_S = 2.0
START_TIMEOUT_S = 120.0
TARGET_CORES = 0.3
TARGET_S = 0.250
BIND_DELAY_MAX_S = 0.3
LISTEN = 1 << 10  # TCP_LISTEN's bit in sock_diag's state mask
BARE_WINDOW_S = env_float("BENCH_BARE_WINDOW_S", 8.0, 3.0)


def spec(index: int, taken: set[int]) -> InferenceSpec:
    """Server ``index``: role ``s<index>``, the tiny model, on a free loopback port not in
    ``taken`` (a port freed a moment ago can be handed out twice); the port joins it."""
    port = free_port()
    while port in taken:
        port = free_port()
    taken.add(port)
    return InferenceSpec(
        role=f"s{index}", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


@attrs.frozen
class Start:
    """The start of the fleet: Running count, false verdicts (exits, departures from
    Running), seconds until all were Running, the loop's lag meanwhile (ms), the exposure
    sample taken under it (s)."""

    running: int
    exits: int
    departures: int
    took_s: float
    lag_ms: dict[str, float | None]
    lag_max_ms: float
    exposure_s: float


async def start_fleet(runtime: InferRuntime, ws: Workspace, rng: random.Random) -> Start:
    """Load `SERVERS` fakes, start them all at once, and follow them until all are Running
    (or `START_TIMEOUT_S`), the loop's lag measured meanwhile and one exposure under way."""
    events = await runtime.subscribe(buffer=100 * SERVERS)
    seen = Seen()
    lag = Overshoot()
    exposure: list[float] = []
    exposed = trio.Event()
    taken: set[int] = set()
    handles = [await runtime.load(spec(index, taken)) for index in range(SERVERS)]
    seen.began = trio.current_time()
    with events:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lag.run)
            nursery.start_soon(seen.follow, events)
            nursery.start_soon(_exposed, ws, rng, exposure, exposed)
            for handle in handles:
                nursery.start_soon(runtime.start, handle)
            with trio.move_on_after(START_TIMEOUT_S):
                await seen.all_up.wait()
                await exposed.wait()
            nursery.cancel_scope.cancel()
    worst = max(lag.samples, default=0.0) * 1e3
    took_s = seen.took_s if seen.took_s is not None else START_TIMEOUT_S
    return Start(
        len(seen.running),
        seen.exits,
        seen.departures,
        took_s,
        lag.summary_ms(),
        worst,
        exposure[0] if exposure else float("nan"),
    )


@attrs.define
class Seen:
    """What the fleet's events said while it started."""

    began: float = 0.0
    running: set[str] = attrs.Factory(set)
    exits: int = 0
    departures: int = 0
    took_s: float | None = None
    all_up: trio.Event = attrs.Factory(trio.Event)

    async def follow(self, events: trio.MemoryReceiveChannel[Event]) -> None:
        async for event in events:
            if isinstance(event, ProcessExited):
                self.exits += 1
            elif isinstance(event, StateChanged):
                self.departures += event.old is InstanceState.RUNNING
                if event.new is InstanceState.RUNNING:
                    self.running.add(event.instance_id)
            if len(self.running) >= SERVERS and self.took_s is None:
                self.took_s = trio.current_time() - self.began
                self.all_up.set()


async def _exposed(ws: Workspace, rng: random.Random, into: list[float], done: trio.Event) -> None:
    into.append(await one_exposure(ws, rng))
    done.set()


async def bare_loop_lag(ws: Workspace, *, spawn: bool) -> tuple[dict[str, float | None], float]:
    """A bare trio loop's lag (ms: p50/p99, max) for the time the product's start took, with
    the same `SERVERS` fake programs spawned at once from a worker thread (``spawn``), or
    with nothing else to do."""
    program = ws.program(FakeServerFaults())
    model = str(ws.root / "models" / "tiny.gguf")
    processes: list[subprocess.Popen[bytes]] = []

    def spawn_all() -> None:
        for _ in range(SERVERS):
            argv = [str(program), "-m", model, "--host", "127.0.0.1", "--port", str(free_port())]
            quiet = subprocess.DEVNULL
            processes.append(subprocess.Popen(argv, stdout=quiet, stderr=quiet, cwd=ws.root))

    lag = Overshoot()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lag.run)
            if spawn:
                await trio.to_thread.run_sync(spawn_all)
            await trio.sleep(BARE_WINDOW_S)
            nursery.cancel_scope.cancel()
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
    return lag.summary_ms(), max(lag.samples, default=0.0) * 1e3


async def cpu_window() -> tuple[float, float]:
    """This process's cores over `WINDOW_S` (after `SETTLE_S`), and its RSS in MiB."""
    await trio.sleep(SETTLE_S)
    began, cpu0 = trio.current_time(), time.process_time()
    await trio.sleep(WINDOW_S)
    cores = (time.process_time() - cpu0) / (trio.current_time() - began)
    return cores, psutil.Process().memory_info().rss / MIB


async def one_exposure(ws: Workspace, rng: random.Random) -> float:
    """Seconds from an exposing server's bind to its ProcessExited arriving."""
    faults = FakeServerFaults(
        extra_port=free_port(), extra_host="0.0.0.0", bind_delay_s=rng.uniform(0, BIND_DELAY_MAX_S)
    )
    config = ws.config(ws.program(faults, pid_file=Path(PID_FILE)))
    assert config.managed is not None
    async with open_runtime(config, node_id="bench") as runtime:
        events = await runtime.subscribe(buffer=1000)
        with events:
            handle = await runtime.load(chat_spec(free_port()))
            iid = handle.instance_id
            await runtime.start(handle)
            await next_event(events, ProcessStarted, lambda e: e.instance_id == iid)
            bound = await written_at(config.managed.data_root / iid / PID_FILE)
            exited, at = await next_event(events, ProcessExited, lambda e: e.instance_id == iid)
        assert exited.reason is StopReason.EXPOSURE, exited
        await runtime.unload(handle)
    return at - bound


def kernel_queries(count: int) -> tuple[list[float], list[float], list[float]]:
    """Seconds per LISTEN dump (both families): raw netlink, pyroute2; and per psutil
    whole-table read."""
    raw, netlink, whole = [], [], []
    pyroute2 = importlib.import_module("pyroute2")  # untyped: used as Any
    ours = SockDiag()
    with pyroute2.DiagSocket() as diag:
        diag.bind()
        for _ in range(count):
            began = time.perf_counter()
            ours.listeners()
            raw.append(time.perf_counter() - began)
            began = time.perf_counter()
            for family in (socket.AF_INET, socket.AF_INET6):
                list(diag.get_sock_stats(family=family, states=LISTEN))
            netlink.append(time.perf_counter() - began)
            began = time.perf_counter()
            psutil.net_connections("tcp")
            whole.append(time.perf_counter() - began)
    ours.close()
    return raw, netlink, whole


async def main() -> None:
    print_context("bench_managed50", SEED)
    rng = random.Random(SEED)
    with workspace() as ws:
        floor = await bare_loop_lag(ws, spawn=False)
        bare = await bare_loop_lag(ws, spawn=True)
        config = ws.config(ws.program(FakeServerFaults()))
        async with open_runtime(config, node_id="bench") as runtime:
            start = await start_fleet(runtime, ws, rng)
            up, started_s = start.running, start.took_s
            print(f"  start: {start}", flush=True)
            cores, rss = await cpu_window()
            handles = await runtime.instances()
            census = Counter([(runtime.status(h)).state.value for h in handles])
            print(f"  {up}/{SERVERS} Running after {started_s:.1f} s; {cores:.3f} core, ", end="")
            print(f"{rss:.0f} MiB; states now {dict(census)}")
            samples, raw, netlink, whole = [], [], [], []
            for number in range(SAMPLES):  # interleaved: an exposure, then 3 kernel queries
                samples.append(await one_exposure(ws, rng))
                print(f"  exposure {number}: {samples[-1] * 1e3:.1f} ms", flush=True)
                more = kernel_queries(3)
                raw += more[0]
                netlink += more[1]
                whole += more[2]
            await runtime.stop_all(5.0)
    print_start(start, floor, bare)
    summary(
        "managed50",
        servers=SERVERS,
        start=attrs.asdict(start),
        floor_lag=floor[0] | {"max": floor[1]},
        bare_lag=bare[0] | {"max": bare[1]},
        cores=cores,
        rss=rss,
        exposure_ms=[s * 1e3 for s in samples],
        dump_us={"raw": median(raw) * 1e6, "pyroute2": median(netlink) * 1e6,
                 "psutil": median(whole) * 1e6},
    )  # fmt: skip
    rows = [
        Row("bind on 0.0.0.0 -> ProcessExited arrives", Summary.of(samples), TARGET_S, "B0"),
        Row("one raw netlink LISTEN dump, both families", Summary.of(raw), key="B0"),
        Row("the same through pyroute2", Summary.of(netlink), key="B1", baseline="B0"),
        Row('one psutil.net_connections("tcp")', Summary.of(whole), key="B2", baseline="B0"),
    ]
    print_table(
        f"{SERVERS} managed fake servers, exposure watch on (exposure: one more server)",
        rows,
        MS,
        [
            f"CPU with {up} of {SERVERS} Running (after {started_s:.1f} s): {cores:.3f} core "
            f"over {WINDOW_S:g} s (this process, every thread), RSS {rss:.0f} MiB; "
            f"target <= {TARGET_CORES} core: {verdict(cores, TARGET_CORES)}",
            f"worst exposure {max(samples) * 1e3:.0f} ms (target < {TARGET_S * 1e3:.0f} ms "
            f"every time: {verdict(max(samples), TARGET_S)}); binds delayed 0-"
            f"{BIND_DELAY_MAX_S} s at random, {len(samples)} samples; instance states meanwhile: "
            f"{dict(census)}.",
            "B1/B2 time a kernel query only: a watcher that asked right after the bind would "
            "know that much later (the floor below any schedule).",
            f"{load_note()} at the end.",
        ],
    )


def print_start(
    start: Start,
    floor: tuple[dict[str, float | None], float],
    bare: tuple[dict[str, float | None], float],
) -> None:
    """The start's figures beside the two bare loops."""

    def lag(figures: dict[str, float | None], worst: float) -> list[str]:
        return [f"{figures['p50'] or 0:.1f}", f"{figures['p99'] or 0:.1f}", f"{worst:.0f}"]

    p99 = start.lag_ms["p99"]
    base = bare[0]["p99"]
    rows = [
        [f"product: {SERVERS} started at once", *lag(start.lag_ms, start.lag_max_ms)],
        [f"L1 bare loop, the same {SERVERS} spawned at once", *lag(*bare)],
        ["L0 bare loop, nothing else", *lag(*floor)],
    ]
    ratio = f"{p99 / base:.2f}x L1" if p99 is not None and base else "-"
    print_grid(
        f"{SERVERS} managed fakes started at once: the loop's lag (ms; a 10 ms sleep's overshoot)",
        ("", "p50", "p99", "max"),
        rows,
        [
            f"Running {start.running}/{SERVERS} in {start.took_s:.1f} s (target all: "
            f"{verdict(start.running, SERVERS, at_least=True)}); false verdicts: "
            f"{start.exits} exits, {start.departures} left Running (target 0: "
            f"{verdict(start.exits + start.departures, 0)})",
            f"product lag p99 {fmt_ms(p99)} = {ratio} (target < 50 ms: {verdict(p99, 50.0)})",
            f"a real exposure under the start: bind -> stopped in "
            f"{start.exposure_s * 1e3:.0f} ms (target < 250 ms: "
            f"{verdict(start.exposure_s, TARGET_S)})",
        ],
    )


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


if __name__ == "__main__":
    trio.run(main)
