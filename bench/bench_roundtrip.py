"""A command's round trip through the facade to the instance actor and back, without I/O.

Issue 3, "Speed": median under 50 µs. Measured: ``runtime.status(handle)`` of a managed
instance that is Loaded (no process, so the actor answers from its own state): facade ->
supervisor inbox -> route -> instance inbox -> reply channel -> caller. The runtime runs on a
`FakeFleet`'s edges; nothing is spawned.

Baselines, in the same run:

* B1: a bare trio memory-channel request/reply between two tasks, with a fresh reply channel
  of buffer 1 per request (what ``_actors.messages.call`` does), one hop.
* B2: the same with two hops (caller -> relay task -> server task), the shape of facade ->
  supervisor -> actor with no work done at either end.

Each sample times a batch of calls and divides; the table gives the median per call over the
batches. Run: ``.venv/bin/python bench/bench_roundtrip.py``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from _common import US, Row, Summary, chat_spec, free_port, print_context, print_table

from inferactors import (
    InferConfig,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ModelRegistry,
    open_runtime,
)
from inferactors.testing import FakeFleet, write_tiny_gguf

BATCHES = 40
CALLS_PER_BATCH = 500
WARMUP_CALLS = 2000
TARGET_S = 50e-6

Request = tuple[int, trio.MemorySendChannel[int]]


async def time_batches(call: Callable[[], Awaitable[object]]) -> list[float]:
    """Seconds per call, one value per batch of `CALLS_PER_BATCH` calls."""
    for _ in range(WARMUP_CALLS):
        await call()
    per_call = []
    for _ in range(BATCHES):
        began = trio.current_time()
        for _ in range(CALLS_PER_BATCH):
            await call()
        per_call.append((trio.current_time() - began) / CALLS_PER_BATCH)
    return per_call


async def ask(inbox: trio.MemorySendChannel[Request], value: int) -> int:
    """One request with a fresh reply channel of buffer 1, as ``_actors.messages.call`` does."""
    send, receive = trio.open_memory_channel[int](1)
    with receive:
        await inbox.send((value, send))
        return await receive.receive()


async def echo(inbox: trio.MemoryReceiveChannel[Request]) -> None:
    """Answer each request with its value, synchronously, and close the reply channel."""
    async for value, reply in inbox:
        with reply:
            reply.send_nowait(value)


async def relay(
    inbox: trio.MemoryReceiveChannel[Request], onward: trio.MemorySendChannel[Request]
) -> None:
    """Forward each request unchanged with ``send_nowait`` (as the supervisor routes)."""
    async for request in inbox:
        onward.send_nowait(request)


async def bare_round_trips(hops: int) -> list[float]:
    """Baseline: per-call seconds of request/reply through ``hops`` (1 or 2) task hops."""
    async with trio.open_nursery() as nursery:
        first_send, first_receive = trio.open_memory_channel[Request](64)
        last_receive = first_receive
        if hops == 2:
            second_send, last_receive = trio.open_memory_channel[Request](64)
            nursery.start_soon(relay, first_receive, second_send)
        nursery.start_soon(echo, last_receive)
        samples = await time_batches(lambda: ask(first_send, 1))
        nursery.cancel_scope.cancel()
    return samples


async def facade_round_trips(directory: Path) -> list[float]:
    """The figure: per-call seconds of ``runtime.status`` of a Loaded managed instance."""
    registry = directory / "models.json"
    ModelRegistry.open(registry).add(write_tiny_gguf(directory / "tiny.gguf"), name="tiny")
    managed = ManagedConfig(
        registry=registry, data_root=directory / "state", serve_program=Path("/bin/true")
    )
    config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    fleet = FakeFleet()
    async with open_runtime(config, node_id="bench", edges=fleet.edges()) as runtime:
        handle = await runtime.load(chat_spec(free_port()))
        status = await runtime.status(handle)
        assert status.state is InstanceState.LOADED, status
        samples = await time_batches(lambda: runtime.status(handle))
        assert not fleet.children, "a status call of a Loaded instance spawned something"
    return samples


async def main() -> None:
    print_context("bench_roundtrip")
    with tempfile.TemporaryDirectory(prefix="inferactors-bench-") as temp:
        figure = await facade_round_trips(Path(temp))
    one_hop = await bare_round_trips(1)
    two_hops = await bare_round_trips(2)
    rows = [
        Row("runtime.status(handle), Loaded, no I/O", Summary.of(figure), TARGET_S, "B1"),
        Row("bare request/reply, 1 hop", Summary.of(one_hop), key="B1"),
        Row("bare request/reply, 2 hops", Summary.of(two_hops), key="B2"),
    ]
    ratio = rows[0].summary.median / rows[2].summary.median
    print_table(
        "Command round trip through the facade (per call)",
        rows,
        US,
        [
            f"{BATCHES} batches of {CALLS_PER_BATCH} calls after {WARMUP_CALLS} warm-up calls; "
            "each sample is one batch's time per call.",
            f"The facade's round trip is {ratio:.2f}x the bare two-hop floor [B2].",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
