"""``status()`` on every path, against a bare trio memory-channel round trip, in one process.

Issue 3, "Speed": ``status()`` of a Loaded (never started) instance, no I/O, median under
50 µs. Issue 11, item 2: ``status()`` of a RUNNING instance within 2x a bare memory-channel
round trip (no I/O: a snapshot the actors publish). Paths, each labelled by what it times:

* never started: a managed instance that is Loaded, on a `FakeFleet`'s edges (nothing is
  spawned);
* managed, Running: the fake llama-server (``inferactors.testing``, a real process, as
  ``nobody`` when root), Running;
* adopted, Running: an adopted fake (``_fake_farm.py``, one port, its own process), Running;
* status of all: ``runtime.statuses()`` of the managed runtime, when the runtime has it.

Baselines, in the same process: B1 a bare trio memory-channel request/reply between two
tasks, with a fresh reply channel of buffer 1 per request (what ``_actors.messages.call``
does), one hop; B2 the same through a relay task (caller -> relay -> server, the shape of
facade -> supervisor -> actor).

Each sample is one batch's time per call: a batch is as many calls as take about 20 ms (at
most 500, at least 1; a path with I/O gets small batches), after about 0.1 s of warm-up.
All paths are interleaved batch by batch (the order rotates every batch).
``--quick``: 10 batches. Run: ``.venv/bin/python bench/bench_roundtrip.py`` (about 15 s).
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import trio
from _child import Child
from _common import (
    US,
    Row,
    Summary,
    Workspace,
    chat_spec,
    env_float,
    free_port,
    load_note,
    print_context,
    print_table,
    workspace,
)

from inferactors import (
    InferConfig,
    InferFlavor,
    InferRuntime,
    InstanceState,
    ManagedConfig,
    ModelRegistry,
    open_runtime,
)
from inferactors.testing import FakeFleet, FakeServerFaults, write_tiny_gguf

BATCHES = int(env_float("BENCH_BATCHES", 40, 10))
CALLS_PER_BATCH = 500
BATCH_S = 0.020
WARMUP_S = 0.1
TARGET_S = 50e-6
TARGET_RATIO = 2.0

Call = Callable[[], Awaitable[object]]
Request = tuple[int, trio.MemorySendChannel[int]]


async def calibrate(call: Call) -> int:
    """Warm ``call`` up for about `WARMUP_S`; return how many calls make a batch."""
    began, calls = trio.current_time(), 0
    while calls < 5 or trio.current_time() - began < WARMUP_S:
        await call()
        calls += 1
    per_call = (trio.current_time() - began) / calls
    return max(1, min(CALLS_PER_BATCH, round(BATCH_S / per_call)))


async def one_batch(call: Call, size: int) -> float:
    """Seconds per call over ``size`` calls."""
    began = trio.current_time()
    for _ in range(size):
        await call()
    return (trio.current_time() - began) / size


async def interleaved(paths: dict[str, Call]) -> dict[str, list[float]]:
    """`BATCHES` batches of every path, the order rotated each batch."""
    sizes = {name: await calibrate(call) for name, call in paths.items()}
    samples: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for number in range(BATCHES):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(await one_batch(paths[name], sizes[name]))
    return samples


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


def bare_path(nursery: trio.Nursery, hops: int) -> Call:
    """Baseline: a request/reply through ``hops`` (1 or 2) task hops."""
    first_send, first_receive = trio.open_memory_channel[Request](64)
    last_receive = first_receive
    if hops == 2:
        second_send, last_receive = trio.open_memory_channel[Request](64)
        nursery.start_soon(relay, first_receive, second_send)
    nursery.start_soon(echo, last_receive)
    return lambda: ask(first_send, 1)


async def loaded_path(stack: AsyncExitStack, directory: Path) -> Call:
    """``status`` of a Loaded managed instance on a `FakeFleet` (nothing spawned)."""
    registry = directory / "models.json"
    ModelRegistry.open(registry).add(write_tiny_gguf(directory / "tiny.gguf"), name="tiny")
    managed = ManagedConfig(
        registry=registry, data_root=directory / "state", serve_program=Path("/bin/true")
    )
    config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    fleet = FakeFleet()
    runtime = await stack.enter_async_context(
        open_runtime(config, node_id="bench", edges=fleet.edges())
    )
    handle = await runtime.load(chat_spec(free_port()))
    status = runtime.status(handle)
    assert status.state is InstanceState.LOADED, status
    return _call(lambda: runtime.status(handle))


def _call(read: Callable[[], object]) -> Call:
    """A plain status read (no message, no wait) as a `Call`, timed like the others."""

    async def call() -> object:
        return read()

    return call


async def running(stack: AsyncExitStack, config: InferConfig, port: int) -> InferRuntime:
    """A runtime of ``config`` whose one instance, on ``port``, is Running."""
    runtime = await stack.enter_async_context(open_runtime(config, node_id="bench"))
    handle = await runtime.load(chat_spec(port))
    await runtime.start(handle)
    with trio.fail_after(60):
        await runtime.wait_state(handle, InstanceState.RUNNING)
    return runtime


async def running_paths(stack: AsyncExitStack, ws: Workspace, port: int) -> dict[str, Call]:
    """``status`` of a Running managed and adopted instance; ``statuses()`` if there."""
    managed = await running(stack, ws.config(ws.program(FakeServerFaults())), free_port())
    adopted = await running(stack, InferConfig.adopted(InferFlavor.LLAMACPP), port)
    (ours,), (theirs,) = await managed.instances(), await adopted.instances()
    paths: dict[str, Call] = {
        "managed": _call(lambda: managed.status(ours)),
        "adopted": _call(lambda: adopted.status(theirs)),
    }
    statuses = getattr(managed, "statuses", None)
    if statuses is not None:

        async def all_of() -> object:
            result = statuses()
            return await result if inspect.iscoroutine(result) else result

        paths["statuses"] = all_of
    return paths


LABELS = {
    "loaded": "status(), never started (Loaded)",
    "managed": "status(), managed, Running",
    "adopted": "status(), adopted, Running",
    "statuses": "statuses(), managed runtime (1 Running)",
}


async def measure() -> dict[str, list[float]]:
    """Every path and both baselines, interleaved."""
    with workspace() as ws, tempfile.TemporaryDirectory(prefix="inferactors-bench-") as temp:
        farm = await Child.start("_fake_farm.py", ["1"])
        try:
            port = (await farm.answer(60))["ports"][0]
            async with AsyncExitStack() as stack:
                paths = {"loaded": await loaded_path(stack, Path(temp))}
                paths.update(await running_paths(stack, ws, port))
                async with trio.open_nursery() as nursery:
                    paths["B1"] = bare_path(nursery, 1)
                    paths["B2"] = bare_path(nursery, 2)
                    samples = await interleaved(paths)
                    nursery.cancel_scope.cancel()
        finally:
            await farm.finish()
    return samples


async def main() -> None:
    print_context("bench_roundtrip")
    samples = await measure()
    rows = [Row("bare request/reply, 1 hop", Summary.of(samples["B1"]), key="B1")]
    rows.append(Row("bare request/reply, 2 hops", Summary.of(samples["B2"]), key="B2"))
    floor = rows[0].summary.median
    notes = []
    for name, label in LABELS.items():
        if name not in samples:
            notes.append(f"{label}: not measured (the runtime has no such method)")
            continue
        summary = Summary.of(samples[name])
        target = TARGET_S if name == "loaded" else TARGET_RATIO * floor
        rows.insert(len(rows) - 2, Row(label, summary, target, "B1"))
        notes.append(f"{label}: {summary.median / floor:.2f}x B1")
    print_table(
        "status() per call, every path, against a bare memory-channel round trip",
        rows,
        US,
        [
            f"targets: a running instance's status() <= {TARGET_RATIO:g}x B1 (the target "
            f"column shows it in µs); the never-started one < {TARGET_S * 1e6:.0f} µs.",
            *notes,
            f"{BATCHES} batches per path, interleaved; each sample is one batch's time per "
            "call (batches of about 20 ms, at most 500 calls).",
            f"{load_note()} at the end.",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
