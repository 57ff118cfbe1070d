"""The front door's cost, against the real llama-server on the tiny model (issue 17 targets).

Three paths to one llama-server (``-np 16``), each proxy in its own process
(``_front_door_worker.py``), all measured in the same run and interleaved:

* direct: the client talks to llama-server itself;
* bare (the baseline): a bare starlette app on the same hypercorn trio worker passing every
  request through one kept-alive httpx client, streaming answers back as they come;
* door: inferactors' front door over an always-resident scheduler.

Figures:

1. Added latency of a one-token chat completion (``max_tokens`` 1, not streamed), p50:
   door minus direct, target at most 1 ms (bare minus direct shown beside it).
2. CPU per proxied request: the proxy process's CPU time (user + system, read from outside
   with psutil) over a batch of one-token requests, per request; door against bare, target
   at most 1.2x.
3. 16 concurrent streams, each ``max_tokens`` `STREAM_TOKENS` (``ignore_eos``): SSE chunks
   received per second over all 16; door against direct, target at least 0.95x.

The client is this process (httpx, keep-alive); it costs the three paths alike. Samples:
``BENCH_SAMPLES`` one-token requests per path (300; ``--quick``: 40), ``BENCH_ROUNDS``
stream rounds per path (3; quick 1). Run: ``.venv/bin/python bench/bench_front_door.py``
(about 1 minute). Without a llama-server it prints SKIPPED and why.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import trio
from _common import env_float, free_port, load_note, print_context, print_grid, verdict

from inferactors.testing import write_tiny_gguf

DEFAULT_LLAMA_SERVER = Path(
    "/var/cache/inferactors/llama-server/llama-cpp-python-0.3.36/bin/llama-server"
)
HERE = Path(__file__).resolve().parent
SAMPLES = int(env_float("BENCH_SAMPLES", 300, 40))
ROUNDS = int(env_float("BENCH_ROUNDS", 3, 1))
STREAMS = 16
STREAM_TOKENS = 64
READY_S = 60.0
ONE_TOKEN = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "the cat"}],
    "max_tokens": 1,
    "cache_prompt": False,
}


def llama_server() -> Path | None:
    path = Path(os.environ.get("INFERACTORS_LLAMA_SERVER") or DEFAULT_LLAMA_SERVER)
    return path if path.is_file() and os.access(path, os.X_OK) else None


async def _until_up(url: str, path: str) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        with trio.fail_after(READY_S):
            while True:
                try:
                    if (await client.get(url + path)).status_code < 500:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


async def _start(argv: list[str]) -> trio.Process:
    return await trio.lowlevel.open_process(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def one_token(client: httpx.AsyncClient, url: str) -> float:
    started = time.perf_counter()
    answer = await client.post(url + "/v1/chat/completions", json=ONE_TOKEN)
    answer.raise_for_status()
    return time.perf_counter() - started


async def latencies(client: httpx.AsyncClient, urls: dict[str, str]) -> dict[str, list[float]]:
    """``SAMPLES`` one-token requests per path, interleaved one by one."""
    seen: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(10):  # warm-up: connections, caches
        for url in urls.values():
            await one_token(client, url)
    for index in range(SAMPLES):
        names = list(urls)
        names = names[index % len(names) :] + names[: index % len(names)]
        for name in names:
            seen[name].append(await one_token(client, urls[name]))
    return seen


async def cpu_per_request(client: httpx.AsyncClient, url: str, pid: int) -> float:
    before = cpu_s(pid)
    for _ in range(SAMPLES):
        await one_token(client, url)
    return (cpu_s(pid) - before) / SAMPLES


async def stream_rate(url: str) -> float:
    """SSE chunks per second over `STREAMS` concurrent streams."""
    body = {**ONE_TOKEN, "max_tokens": STREAM_TOKENS, "stream": True, "ignore_eos": True}
    counts: list[int] = []

    async def one(client: httpx.AsyncClient) -> None:
        chunks = 0
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as answer:
            async for line in answer.aiter_lines():
                chunks += line.startswith("data: ")
        counts.append(chunks)

    limits = httpx.Limits(max_connections=STREAMS * 2)
    async with httpx.AsyncClient(timeout=60.0, limits=limits, trust_env=False) as client:
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(STREAMS):
                nursery.start_soon(one, client)
        elapsed = time.perf_counter() - started
    return sum(counts) / elapsed


async def measure(program: Path, model: Path) -> None:
    port = free_port()
    upstream = f"http://127.0.0.1:{port}"
    server = await _start([str(program), "-m", str(model), "--port", str(port), "-np", "16"])
    proxies: dict[str, trio.Process] = {}
    try:
        await _until_up(upstream, "/health")
        urls = {"direct": upstream}
        for mode in ("bare", "door"):
            proxy_port = free_port()
            worker = [sys.executable, str(HERE / "_front_door_worker.py"), mode]
            proxies[mode] = await _start([*worker, str(proxy_port), upstream])
            urls[mode] = f"http://127.0.0.1:{proxy_port}"
            await _until_up(urls[mode], "/v1/models")
        async with httpx.AsyncClient(timeout=30.0, trust_env=False) as client:
            seen = await latencies(client, urls)
            cpu = {mode: [] for mode in proxies}  # type: dict[str, list[float]]
            for _ in range(2):
                for mode, process in proxies.items():
                    cpu[mode].append(await cpu_per_request(client, urls[mode], process.pid))
        rates: dict[str, list[float]] = {name: [] for name in urls}
        for _ in range(ROUNDS):
            for name, url in urls.items():
                rates[name].append(await stream_rate(url))
        report(seen, cpu, rates)
    finally:
        for process in (server, *proxies.values()):
            process.kill()
            await process.wait()


def report(
    seen: dict[str, list[float]], cpu: dict[str, list[float]], rates: dict[str, list[float]]
) -> None:
    median: Callable[[list[float]], float] = statistics.median
    p50 = {name: median(samples) for name, samples in seen.items()}
    added = {name: p50[name] - p50["direct"] for name in ("bare", "door")}
    cpu_ratio = median(cpu["door"]) / median(cpu["bare"])
    rate = {name: median(samples) for name, samples in rates.items()}
    stream_ratio = rate["door"] / rate["direct"]
    rows = [
        ["one-token p50, direct", f"{p50['direct'] * 1e3:.2f} ms", "", "", ""],
        [
            "one-token p50, bare",
            f"{p50['bare'] * 1e3:.2f} ms",
            f"+{added['bare'] * 1e3:.2f} ms",
            "",
            "",
        ],
        [
            "one-token p50, door",
            f"{p50['door'] * 1e3:.2f} ms",
            f"+{added['door'] * 1e3:.2f} ms",
            "<= +1 ms",
            verdict(added["door"], 0.001),
        ],
        ["CPU per request, bare", f"{median(cpu['bare']) * 1e6:.0f} µs", "", "", ""],
        [
            "CPU per request, door",
            f"{median(cpu['door']) * 1e6:.0f} µs",
            f"{cpu_ratio:.2f}x bare",
            "<= 1.2x",
            verdict(cpu_ratio, 1.2),
        ],
        [f"{STREAMS} streams, direct", f"{rate['direct']:.0f} chunks/s", "", "", ""],
        [
            f"{STREAMS} streams, bare",
            f"{rate['bare']:.0f} chunks/s",
            f"{rate['bare'] / rate['direct']:.2f}x",
            "",
            "",
        ],
        [
            f"{STREAMS} streams, door",
            f"{rate['door']:.0f} chunks/s",
            f"{stream_ratio:.2f}x direct",
            ">= 0.95x",
            verdict(stream_ratio, 0.95, at_least=True),
        ],
    ]
    notes = [
        f"{SAMPLES} one-token requests per path, interleaved; CPU: 2 batches of {SAMPLES}",
        f"{ROUNDS} stream round(s) per path, {STREAMS} x {STREAM_TOKENS} tokens",
        load_note(),
    ]
    header = ["figure", "value", "vs", "target", ""]
    print_grid("front door (issue 17) against the real llama-server", header, rows, notes)


def main() -> None:
    print_context("bench_front_door")
    program = llama_server()
    if program is None:
        print("SKIPPED: no llama-server (set INFERACTORS_LLAMA_SERVER)")
        return
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-front-door-{os.getpid()}"
    model = write_tiny_gguf(directory / "tiny.gguf")
    trio.run(measure, program, model)


if __name__ == "__main__":
    main()
