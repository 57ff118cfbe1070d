"""The harness of the field-case tests in ``tests/e2e``: `Bench` (programs and configs),
`Recorder` (events), waits and the process-group checks. The ``bench`` fixture is in
``tests/e2e/conftest.py``."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psutil
import trio

from inferactors import (
    Event,
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
    ServeArgs,
    StateChanged,
    StopReason,
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
        while (status := runtime.status(handle)).last_probe != last_probe:  # noqa: ASYNC110
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
