"""A crash seen as a ProcessExited event.

Issue 3, "Speed": median within 10 ms of the process's death. Measured on a managed fake
llama-server (``inferactors.testing``) that runs as ``nobody`` and is Running: the benchmark
sends SIGKILL to the pid of its ProcessStarted event (the moment of death, known exactly),
then times the arrival of the ProcessExited event in its own subscription (trio time).
Parts: the event's own ``at`` stamp (when the actor emitted it) against its arrival.

Baselines, in the same run:

* B1, the floor: trio's own ``await process.wait()`` on the same fake server program,
  spawned directly by the benchmark and killed the same way.
* B3, a SIGCHLD-driven loop: the same program spawned with ``subprocess.Popen``, killed the
  same way; a trio task woken by SIGCHLD (``trio.open_signal_receiver``) reaps it with
  ``waitpid(WNOHANG)`` (what a supervisor's event loop without pidfds does).
* B2, a peer's poll: a task that checks every 1 s whether the killed pid is still alive (as
  supervisors that poll their children do), timed on the same kills as the figure. Each
  kill happens at a random moment of the poll's period (a random wait before it).

Run: ``.venv/bin/python bench/bench_crash.py`` (about 30 s).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path

import psutil
import trio
from _common import (
    MS,
    Row,
    Summary,
    Workspace,
    chat_spec,
    env_float,
    free_port,
    next_event,
    print_context,
    print_table,
    workspace,
)

from inferactors import (
    Event,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    StateChanged,
    open_runtime,
)
from inferactors.testing import FakeServerFaults

SAMPLES = int(env_float("BENCH_SAMPLES", 20, 4))
FLOOR_SAMPLES = SAMPLES
POLL_PERIOD_S = 1.0
TARGET_S = 0.010
SEED = int(os.environ.get("BENCH_SEED", "3"))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def poll_until_dead(pid: int, first_poll_at: float) -> float:
    """Check ``pid`` every `POLL_PERIOD_S` from ``first_poll_at``; return when it was seen dead."""
    next_at = first_poll_at
    while True:
        await trio.sleep_until(next_at)
        if not alive(pid):
            return trio.current_time()
        next_at += POLL_PERIOD_S


async def one_crash(
    runtime: InferRuntime,
    handle: InstanceHandle,
    events: trio.MemoryReceiveChannel[Event],
    rng: random.Random,
) -> tuple[float, float, float]:
    """Start, wait for Running, kill at a random poll phase; return (event arrival, event
    stamp, 1 s poll) each minus the kill time, in seconds."""
    iid = handle.instance_id
    await runtime.start(handle)
    started, _ = await next_event(events, ProcessStarted, lambda e: e.instance_id == iid)
    await next_event(
        events, StateChanged, lambda e: e.instance_id == iid and e.new is InstanceState.RUNNING
    )
    poll_started = trio.current_time()
    await trio.sleep(rng.uniform(0.0, POLL_PERIOD_S))
    killed_at = trio.current_time()
    os.kill(started.pid, signal.SIGKILL)
    exited, arrived = await next_event(events, ProcessExited, lambda e: e.pid == started.pid)
    polled = await poll_until_dead(started.pid, poll_started + POLL_PERIOD_S)
    return arrived - killed_at, exited.at - killed_at, polled - killed_at


async def measure_runtime(ws: Workspace, rng: random.Random) -> list[tuple[float, float, float]]:
    """`SAMPLES` crashes of a managed fake server."""
    config = ws.config(ws.program(FakeServerFaults()))
    results = []
    async with open_runtime(config, node_id="bench") as runtime:
        events = await runtime.subscribe(buffer=1000)
        handle = await runtime.load(chat_spec(free_port()))
        for _ in range(SAMPLES):
            results.append(await one_crash(runtime, handle, events, rng))
    return results


async def floor_once(program: Path) -> float:
    """Spawn the fake server ``program`` directly, wait until it listens, SIGKILL it, and
    time ``wait()``."""
    argv = [str(program), "--port", str(free_port()), "-m", "tiny.gguf"]
    process = await trio.lowlevel.open_process(argv, stdout=-1, stderr=-1)
    try:
        assert process.stdout is not None
        with trio.fail_after(30):
            line = await process.stdout.receive_some(4096)
        assert b"listening" in line, line
        killed_at = trio.current_time()
        process.send_signal(signal.SIGKILL)
        await process.wait()
        return trio.current_time() - killed_at
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()


async def sigchld_once(program: Path) -> float:
    """Spawn ``program`` with Popen, wait until it listens, SIGKILL it, and time the reap
    by a task that SIGCHLD wakes."""
    argv = [str(program), "--port", str(free_port()), "-m", "tiny.gguf"]
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        # The baseline owns its child without trio's process machinery (no pidfd).
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
        try:
            assert child.stdout is not None
            async with trio.lowlevel.FdStream(os.dup(child.stdout.fileno())) as out:
                with trio.fail_after(30):
                    line = await out.receive_some(4096)
            assert b"listening" in line, line
            killed_at = trio.current_time()
            os.kill(child.pid, signal.SIGKILL)
            async for _ in signals:
                pid, status = os.waitpid(child.pid, os.WNOHANG)  # noqa: ASYNC222  never blocks
                if pid == child.pid:
                    child.returncode = os.waitstatus_to_exitcode(status)
                    return trio.current_time() - killed_at
            raise RuntimeError("the signal stream ended")
        finally:
            if child.returncode is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()


async def main() -> None:
    print_context("bench_crash", SEED)
    rng = random.Random(SEED)
    with workspace() as ws:
        results = await measure_runtime(ws, rng)
        program = ws.program(FakeServerFaults())
        floor, sigchld = [], []
        for _ in range(FLOOR_SAMPLES):  # interleaved
            floor.append(await floor_once(program))
            sigchld.append(await sigchld_once(program))
    arrival = [r[0] for r in results]
    stamp = [r[1] for r in results]
    polled = [r[2] for r in results]
    relayed = [r[0] - r[1] for r in results]
    rows = [
        Row("kill -> ProcessExited arrives", Summary.of(arrival), TARGET_S, "B1"),
        Row("  part: kill -> actor emits it (event.at)", Summary.of(stamp)),
        Row("  part: emitted -> arrives", Summary.of(relayed)),
        Row("floor: trio process.wait() returns", Summary.of(floor), key="B1"),
        Row("SIGCHLD-driven loop reaps it", Summary.of(sigchld), key="B3"),
        Row("peer: 1 s poll sees it dead", Summary.of(polled), key="B2"),
    ]
    speedup = Summary.of(polled).median / Summary.of(arrival).median
    print_table(
        "Crash seen (SIGKILL sent by the benchmark -> seen)",
        rows,
        MS,
        [
            f"A 1 s poll takes {speedup:.0f}x as long as the ProcessExited event to notice.",
            "Server: the fake llama-server, run as "
            f"{ws.run_as or 'this user'} through its sh wrapper.",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
