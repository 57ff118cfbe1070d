"""Exposure: a managed server with a listener on 0.0.0.0, found and stopped.

Issue 3, "Speed": a listener on 0.0.0.0 stopped within 250 ms; item 4: scan at least every
250 ms while the server runs (the exposure watch, ``_actors/instance/exposure.py``), then
stop it with a 3 s grace. Measured on the fake llama-server (``inferactors.testing``) run as
``nobody``, serving on 127.0.0.1 and also listening on an extra port of 0.0.0.0
(``--extra-port``, FC-15). Nothing connects to that port: the scan finds it in the process
tree's socket table, and the connect check only ever tries 127.0.0.2
(``INFERACTORS_LAN_ADDRESSES``).

"Bind" is the modification time of the server's pid file, which it writes right after both
sockets listen (ext4 and tmpfs stamp it to the microsecond), moved to trio's clock. Every
scan is timed through a wrapper around the real socket-table edge.

Parts: bind -> the end of the scan that found it (the wait for the 250 ms schedule, plus
the scan; a scan can start before the bind and still see it, since it reads the socket
tables in a worker thread a little later), that scan's duration, its end -> the
ExposureDetected event, that event -> ProcessExited (SIGTERM; the fake exits at once).

Each server starts listening after a random delay (``--bind-delay-s``, 0 to 0.3 s), so the
bind falls at every phase of the scan schedule.

Baseline, in the same run: B1, bind -> the end of the first scan that ended after it, the
earliest moment this scan schedule could know (the floor any 250 ms schedule imposes).

A second table: `LATE_SAMPLES` servers that open the extra port `LATE_S` (plus 0 to 0.3 s)
after they listened (``--extra-after-s``), when only the runtime's reads of its LISTEN table
(``_edges/listen_watch.py``) watch for it.

Run: ``.venv/bin/python bench/bench_exposure.py`` (about 50 s).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import attrs
import trio
from _common import (
    MS,
    Row,
    Summary,
    Workspace,
    chat_spec,
    free_port,
    next_event,
    print_context,
    print_table,
    workspace,
)

from inferactors import (
    Edges,
    Exposure,
    ExposureDetected,
    InferRuntime,
    ProcessExited,
    ProcessStarted,
    StopReason,
    open_runtime,
)
from inferactors._edges.netscan import NetScanner, SystemNetScanner
from inferactors._policy.exposure import Listener
from inferactors.testing import FakeServerFaults

SAMPLES = 20
TARGET_S = 0.250
PID_FILE = "fake.pid"
FILE_POLL_S = 0.001
BIND_DELAY_MAX_S = 0.3
"""Each server listens after a delay drawn from 0 to this (seconds): a random scan phase."""
LATE_S = 3.0
"""The late binds come this long (plus 0 to 0.3 s) after the server listened (seconds)."""
LATE_SAMPLES = 8
SEED = int(os.environ.get("BENCH_SEED", "3"))


@attrs.frozen
class Scan:
    """One exposure scan: trio times of its start and end, and whether it found exposure."""

    began: float
    ended: float
    found: bool


@attrs.define
class RecordingNet:
    """The real socket-table edge, recording every exposure scan."""

    inner: NetScanner = attrs.Factory(SystemNetScanner)
    scans: list[Scan] = attrs.Factory(list)

    async def scan(self, pid: int, port: int) -> Exposure | None:
        began = trio.current_time()
        found = await self.inner.scan(pid, port)
        self.scans.append(Scan(began, trio.current_time(), found is not None))
        return found

    async def port_owner(self, host: str, port: int) -> int | None:
        return await self.inner.port_owner(host, port)

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        return await self.inner.tree_owner(pid, host, port)

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        return self.inner.owned_by(pid, group_pgid)

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        return await self.inner.listeners_on(port)

    async def port_exposure(self, port: int) -> Exposure | None:
        return await self.inner.port_exposure(port)

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        return await self.inner.listeners_changed(generation, deadline)


@attrs.frozen
class Stopped:
    """One sample, in seconds after the bind: the end of the first scan that ended after it,
    the finding scan's start and end, ExposureDetected's and ProcessExited's arrivals."""

    first_scan: float
    found_began: float
    found_ended: float
    detected: float
    exited: float


async def written_at(path: Path, timeout_s: float = 30.0) -> float:
    """When ``path`` was written, in trio time: its modification time (the kernel's stamp, so
    a busy event loop here does not delay it), moved from the wall clock to trio's clock.
    Looks for the file every `FILE_POLL_S`."""
    with trio.fail_after(timeout_s):
        # A stat takes microseconds; a worker thread per look would only add delay.
        while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240  no event tells of a file
            await trio.sleep(FILE_POLL_S)
    wall_to_trio = trio.current_time() - time.time()
    return os.stat(path).st_mtime_ns / 1e9 + wall_to_trio


async def one_exposure(
    runtime: InferRuntime, data_root: Path, net: RecordingNet, after_s: float = 0.0
) -> Stopped:
    """Load and start an instance whose server binds 0.0.0.0 too (``after_s`` after its
    other socket); time it until stopped."""
    events = await runtime.subscribe(buffer=1000)
    with events:
        handle = await runtime.load(chat_spec(free_port()))
        iid = handle.instance_id
        net.scans.clear()
        await runtime.start(handle)
        await next_event(events, ProcessStarted, lambda e: e.instance_id == iid)
        bound = await written_at(data_root / iid / PID_FILE) + after_s
        _, detected = await next_event(events, ExposureDetected, lambda e: e.instance_id == iid)
        exited, exited_at = await next_event(events, ProcessExited, lambda e: e.instance_id == iid)
    assert exited.reason is StopReason.EXPOSURE, exited
    await runtime.unload(handle)
    finding = next(scan for scan in net.scans if scan.found)
    first = next((scan for scan in net.scans if scan.ended >= bound), finding)
    return Stopped(
        first.ended - bound,
        finding.began - bound,
        finding.ended - bound,
        detected - bound,
        exited_at - bound,
    )


def rows(samples: list[Stopped]) -> list[Row]:
    """The table: the figure, its parts, the baseline."""

    def of(values: list[float]) -> Summary:
        return Summary.of(values)

    return [
        Row("bind -> ProcessExited (stopped)", of([s.exited for s in samples]), TARGET_S, "B1"),
        Row("  part: bind -> the finding scan ends", of([s.found_ended for s in samples])),
        Row(
            "    in it: that scan's duration",
            of([s.found_ended - s.found_began for s in samples]),
        ),
        Row(
            "  part: scan done -> ExposureDetected",
            of([s.detected - s.found_ended for s in samples]),
        ),
        Row(
            "  part: ExposureDetected -> ProcessExited",
            of([s.exited - s.detected for s in samples]),
        ),
        Row(
            "bind -> end of the next scan (schedule)",
            of([s.first_scan for s in samples]),
            key="B1",
        ),
    ]


async def measure(ws: Workspace, rng: random.Random, *, late: bool) -> list[Stopped]:
    """Exposures, each server binding after a random delay (its own program and runtime),
    so the bind falls at every phase of the 200 ms schedule: `SAMPLES` at its start
    (``late`` False: the whole server listens 0 to 0.3 s late), or `LATE_SAMPLES` of an
    extra port opened `LATE_S` plus 0 to 0.3 s after the server listened (a server long up,
    whose runtime only reads its LISTEN table)."""
    extra_port = free_port()
    net = RecordingNet()
    samples = []
    for _ in range(LATE_SAMPLES if late else SAMPLES):
        delay_s = rng.uniform(0.0, BIND_DELAY_MAX_S)
        late_s = LATE_S + delay_s if late else 0.0
        faults = FakeServerFaults(
            extra_port=extra_port,
            extra_host="0.0.0.0",
            bind_delay_s=0.0 if late else delay_s,
            extra_after_s=late_s,
        )
        config = ws.config(ws.program(faults, pid_file=Path(PID_FILE)))
        assert config.managed is not None
        async with open_runtime(config, node_id="bench", edges=Edges(net=net)) as runtime:
            samples.append(await one_exposure(runtime, config.managed.data_root, net, late_s))
    return samples


async def main() -> None:
    print_context("bench_exposure", SEED)
    with workspace() as ws:
        samples = await measure(ws, random.Random(SEED), late=False)
        later = await measure(ws, random.Random(SEED), late=True)
    late = sum(1 for s in samples if s.found_ended > s.first_scan)
    print_table(
        "Exposure: a listener on 0.0.0.0, from its bind to the server stopped",
        rows(samples),
        MS,
        [
            f"bind: the pid file's modification time; binds delayed 0-{BIND_DELAY_MAX_S} s "
            f"at random; {late} of {SAMPLES} scans that ended first after the bind missed "
            "the listener (their socket-table read came before it).",
        ],
    )
    print_table(
        f"Exposure: a port opened on 0.0.0.0 {LATE_S:g} s after the server listened",
        rows(later)[:1] + rows(later)[4:5],
        MS,
        [
            f"bind: the pid file's modification time plus the delay the fake slept "
            f"({LATE_S:g} to {LATE_S + BIND_DELAY_MAX_S:g} s, at random); by then only the "
            "runtime's LISTEN-table reads (a thread, every 150 to 200 ms) watch for it.",
        ],
    )


if __name__ == "__main__":
    trio.run(main)
