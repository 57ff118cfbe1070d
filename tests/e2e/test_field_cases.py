"""Field cases against real processes: the readiness deadline (issue 3).

One test per field case of /work/shared/reference/field-cases.md, named after its id. A
managed runtime supervises the fake server program of ``inferactors.testing`` with the
case's faults injected, run as ``unprivileged.run_as`` from a world-readable place; every
wait has a generous deadline and no test leaves a process of a server's group behind.

This module also holds the harness the other ``test_field_cases_*`` modules import:
`Bench` (programs and configs), `Recorder` (events) and the process-group checks.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psutil
import pytest
import trio

from inferactors import (
    Event,
    GaveUp,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InstanceStatus,
    ManagedConfig,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    ServeArgs,
    StateChanged,
    StopReason,
    Supervision,
    open_runtime,
)
from inferactors.testing._fake_faults import FakeServerFaults
from inferactors.testing._fake_server import write_fake_server_program
from proc_checks import group_members
from support import Unprivileged

T = TypeVar("T")

WAIT_S = 30.0
"""Deadline of any one wait on a real process (generous: the machine has 2 busy cores)."""

SLACK_S = 2.0
"""How late a timed action may come on a loaded machine (bounds, never exact timings)."""

POLL_S = 0.02
"""How often a test polls what no event announces (processes, files, sockets), seconds."""

NO_RESTARTS = RestartPolicy(max_restarts=0, base_s=0.2, cap_s=0.2, jitter=0.0)


def policy(max_restarts: int, base_s: float = 0.2, cap_s: float = 1.0) -> RestartPolicy:
    """A restart policy without jitter, so delays are exact."""
    return RestartPolicy(max_restarts=max_restarts, base_s=base_s, cap_s=cap_s, jitter=0.0)


def chat(port: int, role: str = "chat") -> InferenceSpec:
    """A managed llama.cpp spec for the registry's ``tiny`` model on ``127.0.0.1:port``."""
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


def another_port() -> int:
    """A loopback TCP port that was free a moment ago (``free_port`` gives one per test)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.frozen
class Bench:
    """Where one test's servers run: fake server programs and managed configs."""

    unprivileged: Unprivileged
    root: Path
    registry: Path

    def program(self, faults: FakeServerFaults, name: str = "fake", **options: Any) -> Path:
        """Write (or rewrite) the fake server program ``name`` injecting ``faults``."""
        return write_fake_server_program(
            self.root / name,
            faults=faults,
            python=self.unprivileged.python,
            sys_path=self.unprivileged.sys_path,
            **options,
        )

    def config(
        self,
        program: Path,
        *,
        restart: RestartPolicy = NO_RESTARTS,
        readiness_timeout_s: float = WAIT_S,
        data_root: str = "state",
    ) -> InferConfig:
        """A managed llama.cpp config running ``program`` as the unprivileged user."""
        managed = ManagedConfig(
            registry=self.registry,
            data_root=self.root / data_root,
            serve_program=program,
            run_as=self.unprivileged.run_as,
            restart=restart,
            readiness_timeout_s=readiness_timeout_s,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=10.0)

    def instance_dir(self, handle: InstanceHandle, data_root: str = "state") -> Path:
        """The instance directory of ``handle``: the server's working directory."""
        return self.root / data_root / handle.instance_id


@pytest.fixture
def bench(unprivileged: Unprivileged, server_dir: Path, registry_path: Path) -> Bench:
    return Bench(unprivileged, server_dir, registry_path)


@attrs.define
class Recorder:
    """Every event of one runtime, in order, awaited with deadlines (real clock)."""

    events: trio.MemoryReceiveChannel[Event]
    seen: list[Event] = attrs.Factory(list)
    _read: int = 0

    async def next(self, kind: type[T], within_s: float = WAIT_S) -> T:
        """The next event of ``kind`` after the last one returned (others stay in `seen`)."""
        with trio.move_on_after(within_s):
            while True:
                while self._read < len(self.seen):
                    event = self.seen[self._read]
                    self._read += 1
                    if isinstance(event, kind):
                        return event
                self.seen.append(await self.events.receive())
        raise AssertionError(f"no {kind.__name__} within {within_s} s; seen: {self.seen}")

    async def state(self, state: InstanceState, within_s: float = WAIT_S) -> StateChanged:
        """The next change to ``state``."""
        with trio.fail_after(within_s):
            while True:
                change = await self.next(StateChanged, within_s)
                if change.new is state:
                    return change

    def drain(self) -> list[Event]:
        """Every event delivered so far (also those not yet returned by `next`)."""
        while True:
            try:
                self.seen.append(self.events.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return self.seen

    def of(self, kind: type[T]) -> list[T]:
        """The events of ``kind`` delivered so far."""
        return [event for event in self.drain() if isinstance(event, kind)]

    def pids(self) -> list[int]:
        """The pid of every server process started so far."""
        return [event.pid for event in self.of(ProcessStarted)]


@asynccontextmanager
async def supervising(config: InferConfig) -> AsyncIterator[tuple[InferRuntime, Recorder]]:
    """A managed runtime and a recorder of all its events; afterwards no server survives."""
    recorder: Recorder | None = None
    try:
        async with open_runtime(config, node_id="fc") as runtime:
            recorder = Recorder(await runtime.subscribe(buffer=1000))
            yield runtime, recorder
    finally:
        if recorder is not None:
            for pid in recorder.pids():
                await assert_group_gone(pid)


async def eventually(check: Callable[[], bool], within_s: float = WAIT_S) -> bool:
    """Poll ``check`` every `POLL_S` until it holds (True) or ``within_s`` passes (False)."""
    with trio.move_on_after(within_s):
        while not check():  # noqa: ASYNC110  processes, files and sockets have no trio event
            await trio.sleep(POLL_S)
        return True
    return False


async def assert_group_gone(pgid: int, within_s: float = 10.0) -> None:
    """Fail unless every process of group ``pgid`` is gone within ``within_s`` seconds."""
    if await eventually(lambda: not group_members(pgid), within_s):
        return
    survivors = {pid: _cmdline(pid) for pid in group_members(pgid)}
    raise AssertionError(f"process group {pgid} outlived its server: {survivors}")


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return "?"


async def wait_members(pgid: int, count: int) -> list[int]:
    """Wait until group ``pgid`` has at least ``count`` live processes; return them."""
    assert await eventually(lambda: len(group_members(pgid)) >= count), f"group {pgid}"
    return group_members(pgid)


async def status_when(
    runtime: InferRuntime, handle: InstanceHandle, *, last_probe: str
) -> InstanceStatus:
    """Poll the status until its last probe says ``last_probe``."""
    with trio.fail_after(WAIT_S):
        while (status := await runtime.status(handle)).last_probe != last_probe:  # noqa: ASYNC110
            await trio.sleep(POLL_S)  # (a status call probes; no event says what it found)
    return status


def within(elapsed_s: float, expected_s: float) -> bool:
    """Whether a timed action came ``expected_s`` after its cause: not early, and at most
    `SLACK_S` late."""
    return expected_s <= elapsed_s < expected_s + SLACK_S


def deadline_kept(
    exited: ProcessExited, started: ProcessStarted, after: float, limit_s: float
) -> bool:
    """Whether a server spawned after trio time ``after`` was killed ``limit_s`` after its
    spawn: not before ``after + limit_s``, and at most `SLACK_S` after its `ProcessStarted`.

    The spawn itself lies between the two: the event is stamped once the spawn's worker
    has also written the server's record (``server.json``, fsynced), which on a loaded
    machine takes a good part of a second.
    """
    return after + limit_s <= exited.at < started.at + limit_s + SLACK_S


def killed_at_once(exited: ProcessExited) -> bool:
    """Whether a stop with no grace ended the server: a readiness kill sends SIGTERM and at
    once SIGKILL, so the fake (which exits 0 on SIGTERM) dies of either."""
    return exited.signal == 9 or exited.exit_code == 0


def reasons(exits: Sequence[ProcessExited]) -> list[StopReason]:
    return [event.reason for event in exits]


# FC-01, FC-02, FC-06: the readiness deadline.


async def test_fc01_slow_load_fails_then_a_longer_deadline_starts_clean(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(load_s=1.5))
    async with supervising(bench.config(program, restart=policy(1))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=0.8))
        asked = trio.current_time()
        await runtime.start(handle)
        first = await rec.next(ProcessStarted)
        killed = await rec.next(ProcessExited)
        assert (killed.pid, killed.reason) == (first.pid, StopReason.READINESS_TIMEOUT)
        assert killed_at_once(killed)
        assert deadline_kept(killed, first, asked, 0.8)
        assert (await rec.next(RestartScheduled)).attempt == 1
        assert (await rec.next(ProcessExited)).reason is StopReason.READINESS_TIMEOUT
        assert (await rec.next(GaveUp)).attempts == 1
        failed = await runtime.status(handle)
        assert (failed.state, failed.stop_reason) == (InstanceState.EXITED, "readiness timeout")
        assert failed.detail == "killed: not ready before the readiness deadline"
        assert failed.supervision is not None
        assert failed.supervision.startswith("gave up")
        assert not [c for c in rec.of(StateChanged) if c.new is InstanceState.RUNNING]

        await runtime.unload(handle)  # no stuck state: reload with a deadline that fits
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=WAIT_S))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        loading = await status_when(runtime, handle, last_probe="loading")  # progress shows
        assert (loading.state, loading.detail) == (InstanceState.DEGRADED, "loading model")
        assert loading.uptime_s is not None
        assert loading.uptime_s > 0
        running = await rec.state(InstanceState.RUNNING)
        assert running.at - started.at >= 1.5  # it waited out the whole load
        assert (await runtime.status(handle)).state is InstanceState.RUNNING


async def test_fc02_readiness_kills_count_toward_the_limit_and_end_in_give_up(
    bench: Bench, free_port: int
) -> None:
    program = bench.program(FakeServerFaults(load_forever=True))
    config = bench.config(program, restart=policy(2, base_s=0.2, cap_s=0.4))
    async with supervising(config) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=0.6))
        asked = trio.current_time()
        await runtime.start(handle)
        gave_up = await rec.next(GaveUp)
        assert gave_up.attempts == 2
        starts, exits = rec.of(ProcessStarted), rec.of(ProcessExited)
        assert len(starts) == len(set(rec.pids())) == 3
        assert reasons(exits) == [StopReason.READINESS_TIMEOUT] * 3
        scheduled = rec.of(RestartScheduled)
        assert [e.attempt for e in scheduled] == [1, 2]
        delays = [e.delay_s for e in scheduled]
        assert delays == pytest.approx([0.2, 0.4])
        spawned_after = [asked, *(e.at + e.delay_s for e in scheduled)]
        for start, exit, after in zip(starts, exits, spawned_after, strict=True):
            assert exit.pid == start.pid
            assert deadline_kept(exit, start, after, 0.6)
        for exit, later, delay in zip(exits, starts[1:], delays, strict=False):
            assert within(later.at - exit.at, delay)
        await trio.sleep(0.5)  # nothing more is spawned after the give-up
        assert len(rec.of(ProcessStarted)) == 3
        status = await runtime.status(handle)
        assert (status.state, status.stop_reason, status.restarts) == (
            InstanceState.EXITED,
            "readiness timeout",
            2,
        )


async def test_fc06_health_503_forever_is_killed_and_counted(bench: Bench, free_port: int) -> None:
    program = bench.program(FakeServerFaults(load_forever=True, fork_child=True))
    async with supervising(bench.config(program, restart=policy(3))) as (runtime, rec):
        handle = await runtime.load(chat(free_port), Supervision(readiness_timeout_s=1.0))
        await runtime.start(handle)
        for attempt in (1, 2):
            started = await rec.next(ProcessStarted)
            await wait_members(started.pid, 2)  # the server and the child it forked
            exited = await rec.next(ProcessExited)
            assert exited.reason is StopReason.READINESS_TIMEOUT
            assert killed_at_once(exited)
            await assert_group_gone(started.pid)  # the whole group, the child too
            assert (await rec.next(RestartScheduled)).attempt == attempt
            status = await runtime.status(handle)
            assert status.restarts == attempt
            assert status.stop_reason == "readiness timeout"
