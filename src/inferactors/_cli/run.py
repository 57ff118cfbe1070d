"""``inferactors run CONFIG.toml``: supervise the configured instances until told to stop.

One runtime is opened per (flavor, mode) pair found in the file; every instance is loaded
and started, events are logged (``--log-format text|json``, ``--log-level``; ISO times with
the date), and on Ctrl-C (SIGINT) or SIGTERM every managed server is stopped cleanly before
the command exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import attrs
import trio

from .._actors.runtime import InferRuntime, InstanceHandle
from .._actors.serving import open_runtime
from .._config.config import ControlMode
from .._config.convert import load_run_config
from .._config.runfile import RunConfig, RunInstance
from .._errors import InferactorsError, UnknownInstance, one_line
from .._events import Event, StateChanged
from .._flavor import InferFlavor
from .._status import InstanceState
from .logging_setup import add_logging_arguments, configure_logging, log_event, say

STOP_GRACE_S = 10.0


def add_run_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors run``."""
    parser = subparsers.add_parser(
        "run", help="supervise the instances of a TOML run file", description=__doc__
    )
    parser.add_argument("config", type=Path, help="the run file (TOML)")
    add_logging_arguments(parser)
    parser.set_defaults(func=run_config)


def run_config(args: argparse.Namespace) -> int:
    """Entry point of ``inferactors run``; returns the exit status."""
    configure_logging(getattr(args, "log_format", "text"), getattr(args, "log_level", "info"))
    try:
        config = load_run_config(args.config)
        return trio.run(_supervise, config)
    except InferactorsError as error:
        print(one_line(f"inferactors run: {error}"), file=sys.stderr)
        return 2 if error.code == "invalid-config" else 1


async def _supervise(config: RunConfig) -> int:
    """Load and start every instance, concurrently (one slow server delays no other),
    while Ctrl-C/SIGTERM is heard at once, even in the middle of start-up."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with AsyncExitStack() as stack:
            runtimes = await _open_runtimes(stack, config)
            async with trio.open_nursery() as nursery:
                for runtime in runtimes.values():
                    nursery.start_soon(_print_events, await runtime.subscribe())
                startup = _Startup(len(config.instances))
                nursery.start_soon(_load_and_start, runtimes, config.instances, nursery, startup)
                async for signum in signals:
                    say(f"{signal.Signals(signum).name}: stopping managed servers")
                    break
                startup.scope.cancel()
                for runtime in runtimes.values():
                    await runtime.stop_all(STOP_GRACE_S)
                await trio.sleep(0.05)  # let the last events print
                nursery.cancel_scope.cancel()
    return 1 if startup.failures else 0


@attrs.define
class _Startup:
    """How start-up went: instances asked for, refused; its scope, cancelled by a signal."""

    total: int
    failures: int = 0
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


async def _open_runtimes(
    stack: AsyncExitStack, config: RunConfig
) -> dict[tuple[InferFlavor, ControlMode], InferRuntime]:
    runtimes: dict[tuple[InferFlavor, ControlMode], InferRuntime] = {}
    for entry in config.instances:
        key = (entry.spec.runtime, entry.mode)
        if key not in runtimes:
            infer = config.infer_config(*key)
            runtime = await stack.enter_async_context(
                open_runtime(infer, node_id=config.node_id, stop_grace_s=STOP_GRACE_S)
            )
            for orphan in runtime.reaped_orphans:
                say(f"found a server left by an earlier life: {orphan}")
            runtimes[key] = runtime
    return runtimes


async def _load_and_start(
    runtimes: dict[tuple[InferFlavor, ControlMode], InferRuntime],
    instances: Sequence[RunInstance],
    nursery: trio.Nursery,
    startup: _Startup,
) -> None:
    with startup.scope:
        async with trio.open_nursery() as each:
            for entry in instances:
                runtime = runtimes[(entry.spec.runtime, entry.mode)]
                each.start_soon(_load_one, runtime, entry, nursery, startup)
        running = startup.total - startup.failures
        say(f"supervising {running} of {startup.total} instance(s); Ctrl-C stops")


async def _load_one(
    runtime: InferRuntime, entry: RunInstance, nursery: trio.Nursery, startup: _Startup
) -> None:
    try:
        handle = await runtime.load(entry.spec, entry.supervision)
        await runtime.start(handle)
    except InferactorsError as error:
        startup.failures += 1
        say(one_line(f"{entry.spec.role}: not started: {error.code}: {error}"))
        return
    say(f"{handle.instance_id}: started ({runtime.id})", instance=handle.instance_id)
    nursery.start_soon(_first_deep_health, runtime, handle)


async def _first_deep_health(runtime: InferRuntime, handle: InstanceHandle) -> None:
    """Once the instance first serves (Running, or Degraded but serving: slow, or its
    ``/health`` failing while completions work), prove it with one real token and say so."""
    try:
        await _wait_serving(runtime, handle)
        result = await runtime.deep_health(handle)
    except InferactorsError as error:
        say(f"{handle.instance_id}  deep health failed: {error}", instance=handle.instance_id)
        return
    latency = f"{result.latency_s * 1000:.1f} ms"
    words = f"deep health: one token {result.text!r} in {latency}"
    say(f"{handle.instance_id}  {words}", instance=handle.instance_id)


async def _wait_serving(runtime: InferRuntime, handle: InstanceHandle) -> None:
    """Wait, without polling, until the instance's status says it serves
    (`InstanceStatus.serving`). Raises `UnknownInstance` once it is unloaded."""
    events = await runtime.subscribe()
    with events:
        while True:
            status = await runtime.status(handle)
            if status.serving or status.state is InstanceState.RUNNING:  # Ollama: Running
                return
            if status.state is InstanceState.UNKNOWN:
                raise UnknownInstance(status.detail or handle.instance_id)
            async for event in events:
                if isinstance(event, StateChanged) and event.instance_id == handle.instance_id:
                    break


async def _print_events(events: trio.MemoryReceiveChannel[Event]) -> None:
    async for event in events:
        log_event(event)
