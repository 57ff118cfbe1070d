"""What the managed llama.cpp runtime tests share: configs, the lab, and event and OS checks.

`managed` is a managed llama.cpp config that never restarts (restart budget 0), so no test
depends on when the supervisor restarts; `Lab` holds one test's registry, data root,
account and helper program (the conftest's ``lab`` fixture builds it), and
`HELPER` is ``tests/helpers/runtime_server.py``, the stand-in server whose behaviour the
config's environment chooses (``RUNTIME_SERVER=silent,fork,...``). The rest read the event
stream, wait for a pid file or a process to be gone, and hold a port (`listening`,
`black_hole`). `fake_fleet_config` and `ClockEvents` are the set-up of the MockClock
supervision tests on a `FakeFleet`: the config and the event stream they read.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psutil
import trio
import trio.testing

from inferactors import (
    Event,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    ManagedConfig,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    ServeArgs,
)
from inferactors._edges.state_lock import LOCK_NAME
from inferactors._models.registry import ModelRegistry
from inferactors.testing import FakeFleet
from support import Unprivileged

HELPER = Path(__file__).parents[1] / "helpers" / "runtime_server.py"


READY_S = 60.0


def managed(
    registry: Path,
    data_root: Path,
    program: Path | None,
    behaviour: str = "serve",
    *,
    run_as: str | None,
    **config: object,
) -> InferConfig:
    """A managed llama.cpp config that never restarts (restart budget 0)."""
    settings = ManagedConfig(
        registry=registry,
        data_root=data_root,
        serve_program=program,
        env=(("RUNTIME_SERVER", behaviour),),
        run_as=run_as,
        restart=RestartPolicy(max_restarts=0),
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, settings, **config)  # type: ignore[arg-type]


def fake_fleet_config(tmp_path: Path, tiny_gguf: Path, restart: RestartPolicy) -> InferConfig:
    """A managed llama.cpp config for a `FakeFleet` run: ``tiny_gguf`` registered as "tiny",
    the given restart policy, readiness deadline 30 s."""
    registry = tmp_path / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="tiny")
    managed = ManagedConfig(
        registry=registry,
        data_root=tmp_path / "state",
        serve_program=Path("/bin/true"),  # never run: the fleet's spawner is a fake
        restart=restart,
        readiness_timeout_s=30.0,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


@attrs.define
class ClockEvents:
    """A runtime on a `FakeFleet`, its event subscription, the virtual time it began, and
    every event read so far (``seen``)."""

    runtime: InferRuntime
    fleet: FakeFleet
    events: trio.MemoryReceiveChannel[Event]
    start: float
    seen: list[Event] = attrs.Factory(list)

    async def next(self, kind: type[Event]) -> Event:
        """The next event of ``kind`` (others are kept in ``seen``), within 1000 virtual s."""
        with trio.move_on_after(1000):
            async for event in self.events:
                self.seen.append(event)
                if isinstance(event, kind):
                    return event
        raise AssertionError(f"no {kind.__name__} event; seen: {self.seen}")

    def at(self) -> float:
        return round(trio.current_time() - self.start, 3)


def chat(
    port: int, *, role: str = "chat", model: str | None = "tiny", host: str | None = None
) -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model=model, serve=ServeArgs(host=host, port=port)
    )


def server_program(unprivileged: Unprivileged, program: Path, helper: Path) -> Path:
    """Write ``program``, an executable that runs ``helper`` with an interpreter the
    unprivileged account can use, and return it."""
    program.parent.mkdir(mode=0o755)
    python, script = shlex.quote(unprivileged.python), shlex.quote(str(helper))
    program.write_text(f'#!/bin/sh\nexec {python} -I {script} "$@"\n')
    program.chmod(0o755)
    return program


@attrs.frozen
class Lab:
    """Where one test's managed servers run: the registry (the tiny model as ``tiny``), a
    data root and the account (``nobody`` when the suite runs as root, see conftest), and
    ``program``, an executable that runs the helper server."""

    registry: Path
    data_root: Path
    run_as: str | None
    program: Path

    def config(
        self,
        program: Path | None = None,
        behaviour: str = "serve",
        *,
        registry: Path | None = None,
        **config: object,
    ) -> InferConfig:
        """`managed` with this lab's settings; ``program`` defaults to the helper."""
        return managed(
            registry or self.registry,
            self.data_root,
            program or self.program,
            behaviour,
            run_as=self.run_as,
            **config,
        )


def drain(events: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    seen = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return seen


def started(events: list[Event]) -> list[ProcessStarted]:
    return [event for event in events if isinstance(event, ProcessStarted)]


def exits(events: list[Event]) -> list[ProcessExited]:
    return [event for event in events if isinstance(event, ProcessExited)]


async def next_exit(events: trio.MemoryReceiveChannel[Event]) -> ProcessExited:
    with trio.fail_after(READY_S):
        async for event in events:
            if isinstance(event, ProcessExited):
                return event
    raise AssertionError("the event stream ended")


async def read_pid(path: Path) -> int:
    """The pid the helper wrote to ``path``, once it is there."""
    file = trio.Path(path)
    with trio.fail_after(READY_S):
        while not await file.exists():  # noqa: ASYNC110  no trio event can tell us about a file
            await trio.sleep(0.01)
    return int(await file.read_text())


def names_in(directory: Path) -> list[str]:
    """The entries of ``directory`` but the supervisor's lock file (``_edges/state_lock``,
    in every managed data root); none when it does not exist."""
    if not directory.exists():
        return []
    return sorted(path.name for path in directory.iterdir() if path.name != LOCK_NAME)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pid: int) -> None:
    with trio.fail_after(10):
        while not gone(pid):  # noqa: ASYNC110  no trio event can tell us about OS state
            await trio.sleep(0.01)


async def ready(runtime: InferRuntime, handle: InstanceHandle) -> None:
    with trio.fail_after(READY_S):
        await runtime.wait_state(handle, InstanceState.RUNNING)


@contextmanager
def listening(port: int, backlog: int = 8) -> Iterator[socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen(backlog)
        yield listener


@contextmanager
def black_hole(port: int) -> Iterator[None]:
    """A listener on ``port`` that never accepts, its queue full: connects hang."""
    clients: list[socket.socket] = []
    with listening(port, backlog=0):
        try:
            for _ in range(8):
                client = socket.socket()
                clients.append(client)
                client.settimeout(0.2)
                try:
                    client.connect(("127.0.0.1", port))
                except TimeoutError:
                    break
            yield
        finally:
            for client in clients:
                client.close()
