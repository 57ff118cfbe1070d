"""One side of ``bench_adopted.py``, in its own process: the product adopting N servers, or
a bare keep-alive prober probing them the same way.

``python bench/_adopted_worker.py product|bare|h11|raw PORTS SEED ADMIT_TIMEOUT_S CONCURRENCY``
(PORTS comma-separated). It admits every port, then prints ``{"admitted": k, "n": N,
"admit_s": seconds, ...}``; from then on a task measures the event loop's lag (how late
each 10 ms sleep wakes). On ``report`` it stops that task, times a status of all
instances `STATUS_ROUNDS` times and prints both. EOF on stdin ends it.

* product: ``open_runtime(InferConfig.adopted(LLAMACPP))``; ``load`` + ``start`` of each
  port (``CONCURRENCY`` at a time), admitted = its ``StateChanged`` to Running arrived. It
  then probes each server at its default interval (1 s). Status of all:
  ``runtime.statuses()`` when the runtime has it, else every ``status(handle)`` at once.
* bare, h11, raw: one keep-alive connection per server (``_bare_probers.py``: httpx with a
  shared TLS context, h11 on a trio stream, pre-built bytes on a trio stream), ``GET
  /health`` then ``GET /v1/models`` at once (admitted = both answered 200), then every 1 s
  from a random phase. Status of all: a copy of its table of last results.
"""

from __future__ import annotations

import inspect
import random
import resource
import ssl
import sys
from collections.abc import Awaitable, Callable

import trio
from _bare_probers import H11Prober, HttpxProber, RawProber
from _child import Overshoot, read_commands, say

from inferactors import (
    Event,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    ServeArgs,
    StateChanged,
    open_runtime,
)

PERIOD_S = 1.0
STATUS_ROUNDS = 5
STATUS_TIMEOUT_S = 30.0


def spec(index: int, port: int) -> InferenceSpec:
    """Adopted server ``index``: role ``s<index>``, model ``tiny``, 127.0.0.1:``port``."""
    return InferenceSpec(
        role=f"s{index}", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


async def serve_commands(
    overshoot_scope: trio.CancelScope, status_all: Callable[[], Awaitable[object]], how: str
) -> None:
    """Answer ``report`` (see the module docstring) until EOF."""
    async for command in read_commands():
        if command != "report":
            continue
        overshoot_scope.cancel()
        times = []
        for _ in range(STATUS_ROUNDS):
            began = trio.current_time()
            with trio.move_on_after(STATUS_TIMEOUT_S):
                await status_all()
            times.append(trio.current_time() - began)
        say(status_all_s=times, status_how=how)
        return


async def measure_tail(
    admitted: int, n: int, admit_s: float, status_all: Callable[[], Awaitable[object]], how: str
) -> dict[str, float | None]:
    """Print the admission line, run the lag task until ``report``, answer it; return the
    lag summary (printed by the caller's last line)."""
    overshoot = Overshoot()
    scope = trio.CancelScope()
    say(admitted=admitted, n=n, admit_s=admit_s)

    async def lag() -> None:
        with scope:
            await overshoot.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lag)
        await serve_commands(scope, status_all, how)
    return overshoot.summary_ms()


# --- the product ----------------------------------------------------------------------------


async def product(ports: list[int], admit_timeout_s: float, concurrency: int) -> None:
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    async with open_runtime(config, node_id="bench") as runtime:
        events = await runtime.subscribe(buffer=max(1000, 20 * len(ports)))
        running: set[str] = set()
        left: list[int] = [0]
        handles: list[InstanceHandle] = []
        errors: list[str] = []
        everyone = trio.Event()
        began = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, events, running, left, len(ports), everyone)
            limiter = trio.CapacityLimiter(concurrency)
            for index, port in enumerate(ports):
                nursery.start_soon(adopt, runtime, spec(index, port), limiter, handles, errors)
            with trio.move_on_after(admit_timeout_s):
                await everyone.wait()
            admit_s = trio.current_time() - began
            admitted = len(running)
            left[0] = 0
            status_all, how = status_of_all(runtime, handles)
            lag = await measure_tail(admitted, len(ports), admit_s, status_all, how)
            say(lag_ms=lag, errors=len(errors), first_error=errors[:1], left_running=left[0])
            nursery.cancel_scope.cancel()


async def adopt(
    runtime: InferRuntime,
    spec: InferenceSpec,
    limiter: trio.CapacityLimiter,
    handles: list[InstanceHandle],
    errors: list[str],
) -> None:
    """Load and start one adopted server; record a refusal instead of raising."""
    async with limiter:
        try:
            handle = await runtime.load(spec)
            handles.append(handle)
            await runtime.start(handle)
        except Exception as error:  # counted and shown: a refusal is a figure here
            errors.append(f"{type(error).__name__}: {error}")


async def watch(
    events: trio.MemoryReceiveChannel[Event],
    running: set[str],
    left: list[int],
    n: int,
    everyone: trio.Event,
) -> None:
    """Track which instances reached Running; count how often one left it."""
    async for event in events:
        if not isinstance(event, StateChanged):
            continue
        if event.new is InstanceState.RUNNING:
            running.add(event.instance_id)
            if len(running) >= n:
                everyone.set()
        elif event.old is InstanceState.RUNNING:
            left[0] += 1


def status_of_all(
    runtime: InferRuntime, handles: list[InstanceHandle]
) -> tuple[Callable[[], Awaitable[object]], str]:
    """How to ask for the status of every instance, and its label."""
    statuses = getattr(runtime, "statuses", None)
    if statuses is not None:

        async def snapshot() -> object:
            result = statuses()
            return await result if inspect.iscoroutine(result) else result

        return snapshot, "runtime.statuses()"

    async def each() -> None:
        for handle in handles:
            runtime.status(handle)  # a plain read of the status board
        await trio.lowlevel.checkpoint()

    return each, f"{len(handles)} x runtime.status()"


# --- the bare prober ------------------------------------------------------------------------


Prober = HttpxProber | H11Prober | RawProber


def make_prober(kind: str, port: int, context: ssl.SSLContext) -> Prober:
    """One server's bare prober of ``kind`` (bare: httpx, h11, raw)."""
    if kind == "h11":
        return H11Prober(port)
    if kind == "raw":
        return RawProber(port)
    return HttpxProber(port, context)


async def bare(kind: str, ports: list[int], admit_timeout_s: float, seed: int) -> None:
    rng = random.Random(seed)
    context = ssl.create_default_context()
    last: dict[int, bool] = {}
    up: set[int] = set()
    everyone = trio.Event()
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        for port in ports:
            phase = rng.uniform(0.0, PERIOD_S)
            prober = make_prober(kind, port, context)
            nursery.start_soon(probe_forever, prober, port, phase, last, up, everyone, len(ports))
        with trio.move_on_after(admit_timeout_s):
            await everyone.wait()
        admit_s = trio.current_time() - began

        async def copy() -> object:
            return dict(last)

        lag = await measure_tail(len(up), len(ports), admit_s, copy, "a copy of its table")
        say(lag_ms=lag, errors=0, first_error=[], left_running=0)
        nursery.cancel_scope.cancel()


async def probe_forever(
    prober: Prober,
    port: int,
    phase_s: float,
    last: dict[int, bool],
    up: set[int],
    everyone: trio.Event,
    n: int,
) -> None:
    """Probe one server at once, then every `PERIOD_S` from ``phase_s`` on."""
    try:
        next_at = trio.current_time() + phase_s
        while True:
            last[port] = ok = await probe(prober)
            if ok and port not in up:
                up.add(port)
                if len(up) >= n:
                    everyone.set()
            await trio.sleep_until(next_at)
            next_at += PERIOD_S
    finally:
        with trio.CancelScope(shield=True):
            await prober.aclose()


async def probe(prober: Prober) -> bool:
    """``GET /health``, then ``GET /v1/models`` when it said 200: both 200?"""
    if await prober.get("/health") != 200:
        return False
    return await prober.get("/v1/models") == 200


def main() -> None:
    mode, ports_text, seed, admit_timeout_s, concurrency = sys.argv[1:6]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ports = [int(port) for port in ports_text.split(",")]
    if mode == "product":
        trio.run(product, ports, float(admit_timeout_s), int(concurrency))
    else:
        trio.run(bare, mode, ports, float(admit_timeout_s), int(seed))


if __name__ == "__main__":
    main()
