"""``inferactors demo``: the main job on an embedded default, end to end.

It writes the tiny GGUF model into the cache, registers it, starts a managed llama-server
on a free loopback port through the runtime, prints every event with a timestamp, waits for
Running, asks for one real token, prints the status table, stops the server and prints its
evidence. Any failure ends it with a non-zero exit and the reason.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import trio

from .._actors.runtime import InferRuntime, InstanceHandle
from .._actors.serving import open_runtime
from .._config.config import InferConfig, ManagedConfig
from .._config.spec import InferenceSpec, ServeArgs
from .._edges.llama_build import cache_dir, ensure_llama_server, make_reachable_dir
from .._errors import InferactorsError, UnknownModel
from .._events import Event, instance_of
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from .._status import InstanceState
from .output import StatusRow, describe_event, evidence_block, stamp, status_table

DEMO_MODEL = "tiny-llama"
DEMO_ROLE = "demo"
"""The demo instance's role: its name in every line the demo prints (its id stays in the
events' and the runtime's data)."""
UNPRIVILEGED_USER = "nobody"
"""Who the demo's server runs as when the demo runs as root (a managed server never runs
as root)."""
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0

DEMO_HELP = """Run the main job end to end on an embedded default: write a tiny GGUF model into
the cache, register it, start a managed llama-server on a free loopback port, print every
event with its time, wait until it runs, ask it for one real token, print the status
table, stop the server and print its evidence. Any failure ends it with a non-zero exit
status and the reason.
"""


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="run a real managed llama-server on a tiny model, probe it, stop it",
        description=DEMO_HELP,
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the model, registry and instance directories go "
        "(default: the inferactors cache, demo/)",
    )
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Entry point of ``inferactors demo``; returns the exit status."""
    work = make_reachable_dir(args.work_dir or cache_dir() / "demo")
    run_as = UNPRIVILEGED_USER if os.geteuid() == 0 else None
    try:
        server = ensure_llama_server()
        print(f"{stamp()}  llama-server: {server}")
        if run_as:
            print(f"{stamp()}  running as root: the server will run as user {run_as}")
        registry_path = _prepare_model(work)
        managed = ManagedConfig(
            registry=registry_path,
            data_root=work / "state",
            serve_program=server,
            run_as=run_as,
        )
        config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
        return trio.run(_demo, config)
    except InferactorsError as error:
        print(f"inferactors demo: failed: {error}", file=sys.stderr)
        return 1


def _prepare_model(work: Path) -> Path:
    from ..testing import write_tiny_gguf

    work.mkdir(parents=True, exist_ok=True)
    model_path = write_tiny_gguf(work / "tiny-llama.gguf")
    registry_path = work / "models.json"
    registry = ModelRegistry.open(registry_path)
    try:
        registry.remove(DEMO_MODEL)  # the file was just rewritten; pin it afresh
    except UnknownModel:
        pass
    manifest = registry.add(model_path, name=DEMO_MODEL)
    shard = manifest.shards[0]
    pin = f"{shard.path}, {shard.size} bytes, blake3 {shard.blake3[:16]}..."
    print(f"{stamp()}  registered {DEMO_MODEL}: {pin}")
    return registry_path


async def _demo(config: InferConfig) -> int:
    async with open_runtime(config, node_id="demo", stop_grace_s=STOP_GRACE_S) as runtime:
        events = await runtime.subscribe()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_print_events, events, DEMO_ROLE)
            code = await _demo_steps(runtime)
            await trio.sleep(0.05)  # let the last events print
            nursery.cancel_scope.cancel()
    return code


async def _demo_steps(runtime: InferRuntime) -> int:
    spec = InferenceSpec(
        role=DEMO_ROLE,
        runtime=InferFlavor.LLAMACPP,
        model=DEMO_MODEL,
        serve=ServeArgs(port=_free_port()),
    )
    admission = await runtime.admit(spec)
    for note in admission.notes:
        print(f"{stamp()}  admit: {note}")
    handle = await runtime.load(spec)
    print(f"{stamp()}  loaded {handle.role}")
    await runtime.start(handle)
    if not await _wait_running(runtime, handle):
        print(
            f"inferactors demo: failed: not running after {READY_TIMEOUT_S:.0f} s", file=sys.stderr
        )
        return 1
    result = await runtime.deep_health(handle)
    print(f"{stamp()}  deep health: one token {result.text!r} in {result.latency_s * 1000:.1f} ms")
    status = runtime.status(handle)
    row = StatusRow(handle.role, status, await runtime.endpoint(handle), DEMO_MODEL)
    print(status_table([row]))
    evidence = await runtime.stop(handle, STOP_GRACE_S)
    await trio.sleep(0.01)  # let the exit events print first
    print(f"{stamp()}  stopped: {evidence.describe()} after {evidence.elapsed_s:.2f} s")
    print(evidence_block(evidence))
    await runtime.unload(handle)
    print(f"{stamp()}  unloaded {handle.role}; demo finished")
    return 0


async def _wait_running(runtime: InferRuntime, handle: InstanceHandle) -> bool:
    with trio.move_on_after(READY_TIMEOUT_S):
        await runtime.wait_state(handle, InstanceState.RUNNING)
        return True
    return False


async def _print_events(events: trio.MemoryReceiveChannel[Event], role: str) -> None:
    """Print each event naming the demo's one instance by its ``role``."""
    async for event in events:
        name = role if instance_of(event) is not None else None
        print(f"{stamp()}  {describe_event(event, name)}", flush=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
