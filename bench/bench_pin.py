"""The pin check's cost at spawn on a 1 GB model, and the window it leaves (issue 8, items 4
and 5).

Figures, on one 1 GiB random ``.gguf`` file under /tmp (deleted afterwards):

* F1 unchanged: ``ModelRegistry.pin(manifest)`` then ``close``, with the file as recorded at
  its last full hash: open the root, walk to the file beneath it, ``fstat``, compare the
  stamp. This is the cheap path every spawn pays. Baseline B1: a plain ``os.stat`` of the
  same file.
* F2 changed: the same after the file's mtime moved (bytes unchanged), so the check
  re-hashes the whole file from its descriptor. Baseline B2: plain streaming BLAKE3 of the
  same file by path, 1 MiB reads (what ``add`` does). B3: ``blake3`` reading it with
  ``update_mmap`` and every core (the fastest this library offers), for scale.
* F3: F1 as a spawn pays it: through ``Edges.file_work`` (a trio worker thread).
* W: the window. Verification ends when ``pin`` returns; the server's own open of the
  model is seen through inotify (``IN_OPEN`` on the file). The real llama-server on the tiny
  model, run as ``nobody`` from its descriptor, as a managed spawn does it.

Run: ``.venv/bin/python bench/bench_pin.py`` (about 40 s; needs 1 GiB free in /tmp).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import blake3
import trio
from _common import (
    MS,
    US,
    Row,
    Summary,
    Workspace,
    free_port,
    print_context,
    print_table,
    workspace,
)

from inferactors import InferFlavor, ModelRegistry
from inferactors._edges.bundle import in_worker_thread
from inferactors._edges.containment import resolve_run_as
from inferactors._edges.llama_build import locate_llama_server
from inferactors._edges.process import ManagedProcess
from inferactors._models.hashing import blake3_file
from inferactors._models.manifest import ModelManifest
from inferactors._policy.launch import Launch
from inferactors._policy.pin_launch import PinnedFds, pin_launch

SIZE = 1 << 30
CHEAP_SAMPLES = 300
HASH_SAMPLES = 5
WINDOW_SAMPLES = 10
IN_OPEN = 0x20
_libc = ctypes.CDLL(None, use_errno=True)


def write_random(path: Path, size: int) -> None:
    chunk = os.urandom(1 << 24)
    with path.open("wb") as handle:
        for _ in range(size // len(chunk)):
            handle.write(chunk[:8] + os.urandom(8) + chunk[16:])  # no two chunks alike


def timed(action: Callable[[], object], samples: int) -> list[float]:
    seconds = []
    for _ in range(samples):
        began = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - began)
    return seconds


def touch(path: Path) -> None:
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1000))


def pin_close(registry: ModelRegistry, manifest: ModelManifest) -> None:
    registry.pin(manifest).close()


def changed_pin(registry: ModelRegistry, manifest: ModelManifest, path: Path) -> list[float]:
    seconds = []
    for _ in range(HASH_SAMPLES):
        touch(path)
        seconds += timed(partial(pin_close, registry, manifest), 1)
    return seconds


def mmap_all_cores(path: Path) -> None:
    blake3.blake3(max_threads=blake3.blake3.AUTO).update_mmap(path)


async def threaded(registry: ModelRegistry, manifest: ModelManifest) -> list[float]:
    seconds = []
    for _ in range(CHEAP_SAMPLES):
        began = trio.current_time()
        await in_worker_thread(partial(pin_close, registry, manifest))
        seconds.append(trio.current_time() - began)
    return seconds


def inotify_open_watch(path: Path) -> int:
    fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0 or _libc.inotify_add_watch(fd, str(path).encode(), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    return int(fd)


async def one_window(space: Workspace, server: Path, model: Path) -> float:
    """Seconds from the end of verification to llama-server's own open of the model."""
    registry = ModelRegistry.open(space.registry)
    run_as = resolve_run_as(space.run_as) if space.run_as else None
    with registry.pin(registry.get("tiny")) as pinned:
        verified = trio.current_time()
        watch = inotify_open_watch(model)
        try:
            assert pinned.root_fd is not None
            shards = (("tiny.gguf", pinned.shard_fds()[0]),)
            args = ("-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()))
            launch = pin_launch(
                Launch(server, args, model.parent, (("PATH", "/usr/bin:/bin"),)),
                InferFlavor.LLAMACPP,
                PinnedFds(shards),
            )
            async with trio.open_nursery() as nursery:
                process = await ManagedProcess.spawn(nursery, launch, run_as=run_as)
                await trio.lowlevel.wait_readable(watch)
                opened = trio.current_time()
                await process.terminate(5.0)
        finally:
            os.close(watch)
    return opened - verified


async def windows() -> list[float]:
    server = locate_llama_server()
    if server is None:
        raise SystemExit("no llama-server: set INFERACTORS_LLAMA_SERVER")
    with workspace() as space:
        model = space.root / "models" / "tiny.gguf"
        return [await one_window(space, server, model) for _ in range(WINDOW_SAMPLES)]


async def main() -> None:
    print_context("bench_pin")
    with tempfile.TemporaryDirectory(prefix="inferactors-bench-pin-", dir="/tmp") as temp:
        path = Path(temp) / "big.gguf"
        write_random(path, SIZE)
        registry = ModelRegistry.in_memory()
        manifest = registry.add(path, name="big")
        registry.resolve("big")  # the stamps of a full hash are recorded
        cheap = timed(partial(pin_close, registry, manifest), CHEAP_SAMPLES)
        stat = timed(partial(os.stat, path), CHEAP_SAMPLES)
        in_thread = await threaded(registry, manifest)
        changed = changed_pin(registry, manifest, path)
        plain = timed(partial(blake3_file, path), HASH_SAMPLES)
        fastest = timed(partial(mmap_all_cores, path), HASH_SAMPLES)
    window = await windows()
    report(cheap, stat, in_thread, changed, plain, fastest, window)


def report(
    cheap: list[float],
    stat: list[float],
    in_thread: list[float],
    changed: list[float],
    plain: list[float],
    fastest: list[float],
    window: list[float],
) -> None:
    gib = SIZE / (1 << 30)
    print_table(
        f"Pin check at spawn, unchanged model ({gib:.0f} GiB, one file)",
        [
            Row("[F1] pin + close, stamp unchanged", Summary.of(cheap), baseline="B1"),
            Row("[F3] F1 through a worker thread", Summary.of(in_thread), baseline="B1"),
            Row("plain os.stat of the file", Summary.of(stat), key="B1"),
        ],
        US,
    )
    rate = SIZE / 1e9 / Summary.of(changed).median
    print_table(
        f"Pin check at spawn, changed model ({gib:.0f} GiB, full BLAKE3 re-hash)",
        [
            Row("[F2] pin + close, mtime moved", Summary.of(changed), baseline="B2"),
            Row("plain BLAKE3 by path, 1 MiB reads", Summary.of(plain), key="B2"),
            Row("BLAKE3 update_mmap, all cores", Summary.of(fastest), key="B3"),
        ],
        MS,
        [f"F2 hashes {rate:.2f} GB/s."],
    )
    print_table(
        "Window: verified -> the real llama-server opens its descriptor (tiny model)",
        [Row("[W] pin returned -> server's open (inotify)", Summary.of(window))],
        MS,
        ["The server opens the verified inode itself; what remains is in-place writes."],
    )


if __name__ == "__main__":
    trio.run(main)
