"""Readiness seen: a managed server's StateChanged to Running against its first 200 on /health.

Issue 3, "Speed": median within 25 ms of the server's first 200 on ``/health`` (peers poll
every 1 to 3 s), with probing that starts fast and backs off to a bounded interval (the
monitor: 10 ms doubling to 100 ms until up, ``_actors/instance/probing.py``).

The server is the fake llama-server (``inferactors.testing``) run as ``nobody`` with
``--load-s L`` (503 "Loading model" for L seconds after it listens, then 200), L drawn at
random per sample so the load ends at every phase of the probe schedule. Its request log
stamps every request in seconds since it listened. Readiness also needs one real token
after ``/health`` says 200 (the first-token check, FC-03, FC-07), so the figure has parts:

* ready -> first 200: the load ends; the next probe's ``GET /health`` gets the first 200
  (the wait for the probe schedule, bounded by the 100 ms cap);
* first 200 -> the token check's ``GET /health``: the rest of that probe (``/v1/models``, the
  listener identity check, which reads the system's socket table) and opening the token
  check's own HTTP client (both also timed on their own);
* that ``GET /health`` -> token asked: the token check probes again (``/health``,
  ``/v1/models``) before it asks;
* token asked -> Running: the completion, then the actor's state change and its event.

The server's clock is tied to trio's by the benchmark's own ``GET /v1/models?bridge=N``
requests, sent once the instance is Running: each is logged between its send and its answer,
so the offset is known to within half the fastest round trip (printed).

Issue 11, item 3: ready (the load ends, on the server's own clock) -> the Running event,
median at most 10 ms (the "total" row; ``bench_readiness_real.py`` times the same on the real
llama-server from its ready line).

Baselines, in the same run, on the same program started directly (no inferactors):

* B1: a poll every 1 s with a random phase (what peers do), ready -> its first 200 seen;
* B2: the floor, a tight poll every 1 ms, ready -> its first 200 seen.

Run: ``.venv/bin/python bench/bench_readiness.py`` (about 45 s).
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import attrs
import trio
from _common import (
    MS,
    Exchange,
    Row,
    Summary,
    Workspace,
    chat_spec,
    free_port,
    get,
    next_event,
    print_context,
    print_table,
    workspace,
)

from inferactors import (
    Edges,
    Exposure,
    InferRuntime,
    InstanceState,
    ProbeClient,
    StateChanged,
    open_runtime,
)
from inferactors._edges.netscan import NetScanner, SystemNetScanner
from inferactors._policy.exposure import Listener
from inferactors.testing import FakeServerFaults
from inferactors.testing._fake_server import LoggedRequest, read_request_log

SAMPLES = 20
BASELINE_SAMPLES = 20
LOAD_S = (0.25, 0.55)
"""Each sample's load time is drawn uniformly from this range (seconds)."""
TARGET_S = 0.025
TARGET_READY_S = 0.010
"""Issue 11, item 3: server ready (its load ended, its own clock) -> Running, median."""
SEED = int(os.environ.get("BENCH_SEED", "3"))
REQUEST_LOG = "requests.log"
BRIDGES = 5
CLIENT_OPENS = 20
TIGHT_LEAD_S = 0.03


@attrs.frozen
class Bridge:
    """Trio time minus the server's clock (``at_s``), and half the round trip it came from."""

    offset: float
    uncertainty: float

    @classmethod
    def best(cls, sent: dict[str, Exchange], logged: tuple[LoggedRequest, ...]) -> Bridge:
        """The bridge from the answered exchange (keyed by its path) with the shortest round
        trip that appears in ``logged``.

        Raises:
            ValueError: no exchange was both answered and logged.
        """
        pairs = [(sent[e.path], e) for e in logged if e.path in sent and sent[e.path].status]
        if not pairs:
            raise ValueError("no request of ours was answered and logged")
        exchange, entry = min(pairs, key=lambda pair: pair[0].answered_at - pair[0].sent_at)
        half = (exchange.answered_at - exchange.sent_at) / 2
        return cls(exchange.sent_at + half - entry.at_s, half)


@attrs.frozen
class Readiness:
    """One managed sample, in seconds after the load ended (the server's clock bridged to
    trio's): the first 200 on ``/health``, the token request, the Running event's arrival;
    and the bridge's uncertainty."""

    first_200: float
    token_probe: float
    token_asked: float
    running: float
    uncertainty: float


def first_health_200(logged: tuple[LoggedRequest, ...]) -> LoggedRequest:
    """The first ``GET /health`` answered 200: the first one the probe followed with
    ``GET /v1/models``, which it asks only of a server that is up. (Its ``at_s`` can be a
    hair before ``load_s``: the line is logged before the answer is decided.)"""
    pairs = itertools.pairwise(logged)
    return next(e for e, after in pairs if e.path == "/health" and after.path == "/v1/models")


def first_token_request(logged: tuple[LoggedRequest, ...]) -> LoggedRequest:
    """The first completion request (the first-token check)."""
    return next(e for e in logged if e.method == "POST")


def token_probe(logged: tuple[LoggedRequest, ...], token: LoggedRequest) -> LoggedRequest:
    """The first-token check's own ``GET /health``: the last one logged before ``token``."""
    return [e for e in logged if e.path == "/health" and e.at_s <= token.at_s][-1]


@attrs.define
class RecordingNet:
    """The real socket-table edge, timing each listener identity check (``tree_owner`` and,
    when that finds nothing, ``port_owner``)."""

    inner: NetScanner = attrs.Factory(SystemNetScanner)
    owner_checks: list[float] = attrs.Factory(list)

    async def scan(self, pid: int, port: int) -> Exposure | None:
        return await self.inner.scan(pid, port)

    async def port_owner(self, host: str, port: int) -> int | None:
        began = trio.current_time()
        try:
            return await self.inner.port_owner(host, port)
        finally:
            self.owner_checks.append(trio.current_time() - began)

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        began = trio.current_time()
        try:
            return await self.inner.tree_owner(pid, host, port)
        finally:
            self.owner_checks.append(trio.current_time() - began)

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        return self.inner.owned_by(pid, group_pgid)

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        return await self.inner.listeners_on(port)

    async def port_exposure(self, port: int) -> Exposure | None:
        return await self.inner.port_exposure(port)

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        return await self.inner.listeners_changed(generation, deadline)


async def bridge_now(port: int, log: Path) -> tuple[Bridge, tuple[LoggedRequest, ...]]:
    """Send `BRIDGES` tagged GETs to the running server; return the best bridge and the log."""
    sent = {}
    for number in range(BRIDGES):
        path = f"/v1/models?bridge={number}"
        sent[path] = await get(port, path)
    logged = read_request_log(log)
    return Bridge.best(sent, logged), logged


async def one_managed(runtime: InferRuntime, data_root: Path, load_s: float) -> Readiness:
    """Load an instance whose server loads for ``load_s``, start it, wait for Running, bridge
    the clocks (the request log is in its instance directory), unload it."""
    port = free_port()
    events = await runtime.subscribe(buffer=1000)
    with events:
        handle = await runtime.load(chat_spec(port))
        iid = handle.instance_id
        await runtime.start(handle)
        _, running_at = await next_event(
            events,
            StateChanged,
            lambda e: e.instance_id == iid and e.new is InstanceState.RUNNING,
            timeout_s=60.0,
        )
    link, logged = await bridge_now(port, data_root / iid / REQUEST_LOG)
    await runtime.stop(handle, 5.0)
    await runtime.unload(handle)
    ready = link.offset + load_s
    first = first_health_200(logged)
    token = first_token_request(logged)
    sample = Readiness(
        link.offset + first.at_s - ready,
        link.offset + token_probe(logged, token).at_s - ready,
        link.offset + token.at_s - ready,
        running_at - ready,
        link.uncertainty,
    )
    return sample


async def measure_managed(ws: Workspace, rng: random.Random) -> tuple[list[Readiness], list[float]]:
    """`SAMPLES` readiness samples through managed runtimes, and the identity checks' times.

    Each sample has its own load time, so its own program, runtime and instance.
    """
    net = RecordingNet()
    samples = []
    for _ in range(SAMPLES):
        load_s = rng.uniform(*LOAD_S)
        program = ws.program(FakeServerFaults(load_s=load_s), request_log=Path(REQUEST_LOG))
        config = ws.config(program)
        assert config.managed is not None
        async with open_runtime(config, node_id="bench", edges=Edges(net=net)) as runtime:
            samples.append(await one_managed(runtime, config.managed.data_root, load_s))
    return samples, net.owner_checks


async def time_client_opens() -> list[float]:
    """Seconds each of `CLIENT_OPENS` ``ProbeClient.open`` calls takes: what the first-token
    check pays to open its own client (a synchronous call, so the event loop waits too)."""
    samples = []
    for _ in range(CLIENT_OPENS):
        began = trio.current_time()
        client = ProbeClient.open("http://127.0.0.1:9", timeout_s=2.0)
        samples.append(trio.current_time() - began)
        await client.aclose()
    return samples


@attrs.frozen
class Polled:
    """One baseline sample, in seconds after the load ended: when the 1 s poll and the 1 ms
    poll first saw a 200."""

    slow: float
    tight: float


async def poll(
    port: int,
    tag: str,
    period_s: float,
    sent: dict[str, Exchange],
    done: Callable[[Exchange], bool] = lambda exchange: exchange.status == 200,
) -> Exchange:
    """GET ``/health?<tag>=N`` (a new connection each) every ``period_s`` from now until an
    exchange is ``done`` (default: a 200); record every exchange in ``sent``; return the last."""
    next_at, number = trio.current_time(), 0
    while True:
        await trio.sleep_until(next_at)
        path = f"/health?{tag}={number}"
        exchange = sent[path] = await get(port, path)
        if done(exchange):
            return exchange
        number += 1
        next_at = max(next_at + period_s, trio.current_time())


async def slow_poll(port: int, phase_s: float, sent: dict[str, Exchange]) -> Exchange:
    """The peer: a GET every 1 s, the first ``phase_s`` from now, until a 200."""
    await trio.sleep(phase_s)
    return await poll(port, "slow", 1.0, sent)


async def tight_poll(port: int, load_s: float, sent: dict[str, Exchange]) -> Exchange:
    """The floor: a GET every 1 ms until a 200, from `TIGHT_LEAD_S` before the load should
    end (known from the first answer, polled every 5 ms). Polling tightly only around the
    end keeps the closed connections (TIME_WAIT sockets, which slow every reader of the
    socket table) to a few dozen per sample."""
    listening = await poll(port, "wait", 0.005, sent, lambda e: e.status is not None)
    await trio.sleep_until(listening.sent_at + load_s - TIGHT_LEAD_S)
    return await poll(port, "tight", 0.001, sent)


async def one_polled(program: Path, directory: Path, load_s: float, phase_s: float) -> Polled:
    """Run the fake server directly, poll it both ways until each poll sees a 200, and
    bridge the clocks with the polls' requests."""
    port = free_port()
    argv = [str(program), "--port", str(port), "-m", "tiny.gguf"]
    sent: dict[str, Exchange] = {}
    found: dict[str, Exchange] = {}

    async def run(name: str, poller: Callable[[], Awaitable[Exchange]]) -> None:
        found[name] = await poller()

    quiet = subprocess.DEVNULL
    process = await trio.lowlevel.open_process(argv, cwd=directory, stdout=quiet, stderr=quiet)
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "slow", partial(slow_poll, port, phase_s, sent))
                nursery.start_soon(run, "tight", partial(tight_poll, port, load_s, sent))
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
    link = Bridge.best(sent, read_request_log(directory / REQUEST_LOG))
    ready = link.offset + load_s
    return Polled(found["slow"].answered_at - ready, found["tight"].answered_at - ready)


async def measure_polls(ws: Workspace, rng: random.Random) -> list[Polled]:
    """`BASELINE_SAMPLES` samples of the two polls, each with its own load time and phase."""
    samples = []
    for _ in range(BASELINE_SAMPLES):
        load_s = rng.uniform(*LOAD_S)
        program = ws.program(FakeServerFaults(load_s=load_s), request_log=Path(REQUEST_LOG))
        phase_s = rng.uniform(0.0, 1.0)
        samples.append(await one_polled(program, ws.directory("poll"), load_s, phase_s))
    return samples


def rows(
    managed: list[Readiness], polled: list[Polled], owner_checks: list[float], opens: list[float]
) -> list[Row]:
    """The table: the figure, its parts, the baselines."""
    seen = Summary.of([m.running - m.first_200 for m in managed])
    return [
        Row("first /health 200 -> Running event", seen, TARGET_S),
        Row(
            "  part: first 200 -> token check's GET /health",
            Summary.of([m.token_probe - m.first_200 for m in managed]),
        ),
        Row("    in it: one identity check (port_owner)", Summary.of(owner_checks)),
        Row("    in it: one ProbeClient.open (blocking)", Summary.of(opens)),
        Row(
            "  part: token check's GET /health -> token asked",
            Summary.of([m.token_asked - m.token_probe for m in managed]),
        ),
        Row(
            "  part: token asked -> Running event",
            Summary.of([m.running - m.token_asked for m in managed]),
        ),
        Row("ready -> first /health 200 (probe wait)", Summary.of([m.first_200 for m in managed])),
        Row(
            "ready -> Running event (total)",
            Summary.of([m.running for m in managed]),
            TARGET_READY_S,
            baseline="B2",
        ),
        Row("peer: 1 s poll, ready -> 200 seen", Summary.of([p.slow for p in polled]), key="B1"),
        Row("floor: 1 ms poll, ready -> 200 seen", Summary.of([p.tight for p in polled]), key="B2"),
    ]


async def main() -> None:
    print_context("bench_readiness", SEED)
    rng = random.Random(SEED)
    with workspace() as ws:
        managed, owner_checks = await measure_managed(ws, rng)
        polled = await measure_polls(ws, rng)
    opens = await time_client_opens()
    table = rows(managed, polled, owner_checks, opens)
    total = Summary.of([m.running for m in managed]).median
    floor = Summary.of([p.tight for p in polled]).median
    worst_bridge = max(m.uncertainty for m in managed)
    print_table(
        "Readiness seen (times after the server's load ended, unless said otherwise)",
        table,
        MS,
        [
            f"load times drawn from {LOAD_S[0]}-{LOAD_S[1]} s; clock bridge within "
            f"+-{worst_bridge * 1e3:.2f} ms (worst sample).",
            f"ready -> Running is {total / floor:.1f}x the 1 ms poll's floor [B2].",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
