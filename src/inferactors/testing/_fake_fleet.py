"""A fleet of fake server processes that lives entirely inside trio, for ``MockClock`` tests.

`FakeFleet.edges()` gives a runtime `Edges` bundle whose process spawner, HTTP probes,
socket tables, port check and jitter are all fakes: a spawned "server" is a `FakeChild`
that answers llama-server's ``/health``, ``/v1/models`` and one-token completions on its
``--port`` while it lives, and that a test crashes, hangs or slows at will. Nothing touches
the operating system, so trio's ``MockClock(autojump_threshold=0)`` drives every delay,
backoff and deadline exactly.
"""

from __future__ import annotations

import json
import signal as signals
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import attrs
import httpx
import trio

from .._edges.bundle import Edges, http_prober_factory
from .._policy.exposure import Exposure, Listener
from .._policy.launch import Launch
from .._policy.privilege import RunAs
from .._policy.probe_schedule import next_tick
from ._fake_residency import FakeMemory, FakeStream, MiB, stream_response, streaming

T = TypeVar("T")

_FIRST_FAKE_PID = 900_000

EXPOSURE_TICK_S = 0.2
"""How often the fake socket table says "maybe changed" (float seconds of trio time), as
the real one reads the host's table (`listen_watch.PERIOD_S`)."""


class _EndOfOutput(trio.abc.ReceiveStream):
    """A pipe that stays silent until its process exits, then gives what the process said
    as it died (``FakeChild.crash(stderr=...)``) and reaches EOF."""

    def __init__(self, exited: trio.Event, said: Callable[[], bytes] = bytes) -> None:
        self._exited = exited
        self._said = said
        self._told = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await self._exited.wait()
        if not self._told:
            self._told = True
            return self._said()
        return b""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class FakeChild:
    """One fake server process; ``crash``/``hang``/``ready_at`` are the test's levers.

    Attributes:
        pid: a fake pid (never a real process).
        argv: the argv it was started with.
        port: the ``--port`` value from argv.
        started_at: trio time of the spawn.
        ready_at: trio time from which ``/health`` answers 200 (503 before); None: never.
        hang_completions: completions never answer (FC-04).
        ignore_term: SIGTERM does nothing (FC-05, FC-11).
        dead_generator: ``/health`` answers 503 ``{"status": "unavailable"}`` like
            mlx_lm.server 0.32.2 whose generation thread died (FC-07).
        returncode: None while alive; ``-N`` when killed by signal N.
        footprint_bytes: the memory it holds while alive (`FakeFleet.memory` sees it).
        exit_s: a SIGTERM ends it only this many seconds later (a slow exit); SIGKILL
            ends it at once.
        release_s: its memory comes back only this many seconds after it exited (a
            driver or the kernel slow to give it back); None: never.
        exited_at: trio time of its exit, None while alive.
        stream: how its streamed completions go (`FakeStream`).
    """

    pid: int
    argv: tuple[str, ...]
    port: int
    started_at: float
    ready_at: float | None
    hang_completions: bool = False
    ignore_term: bool = False
    dead_generator: bool = False
    returncode: int | None = None
    said: bytes = b""
    footprint_bytes: int = 0
    exit_s: float = 0.0
    release_s: float | None = 0.0
    exited_at: float | None = None
    stream: FakeStream = FakeStream()  # noqa: RUF009  (frozen value)
    _exited: trio.Event = attrs.Factory(trio.Event)

    @property
    def alive(self) -> bool:
        """Whether it has not exited."""
        return self.returncode is None

    def crash(
        self, *, exit_code: int | None = 1, signal: int | None = None, stderr: bytes = b""
    ) -> None:
        """End it now, with ``exit_code`` or (when given) killed by ``signal``, having
        written ``stderr`` (a real server's last words, for its diagnosis)."""
        if self.alive:
            self.said = stderr
            self.returncode = -signal if signal is not None else exit_code
            self.exited_at = trio.current_time()
            self._exited.set()

    def holds(self, now: float) -> int:
        """The memory it holds at ``now``: its footprint while alive, and after its exit
        until its memory is released (`release_s`)."""
        if self.exited_at is None:
            return self.footprint_bytes
        if self.release_s is None or now < self.exited_at + self.release_s:
            return self.footprint_bytes
        return 0

    # The ChildProcess protocol of inferactors._edges.process.

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return _EndOfOutput(self._exited)

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return _EndOfOutput(self._exited, lambda: self.said)

    async def wait_exiting(self) -> None:
        await self._exited.wait()

    def reap(self) -> int:
        assert self.returncode is not None, "reaped before it exited"
        return self.returncode

    def group_alive(self) -> bool:
        return False  # a fake server is a leader alone: nothing outlives it

    def signal_group(self, signum: int) -> bool:
        if not self.alive:
            return False
        if signum == signals.SIGTERM and self.ignore_term:
            return True
        if signum == signals.SIGTERM and self.exit_s > 0:
            trio.lowlevel.spawn_system_task(self._exit_later, signum)
            return True
        if signum in (signals.SIGTERM, signals.SIGKILL, signals.SIGINT):
            self.crash(exit_code=None, signal=signum)
        return True

    async def _exit_later(self, signum: int) -> None:
        await trio.sleep(self.exit_s)
        self.crash(exit_code=None, signal=signum)


@attrs.define(eq=False)
class FakeFleet:
    """Fake server processes plus the fake edges that see them.

    Attributes:
        load_s: seconds a new child answers 503 "Loading model" before 200; None: forever
            (FC-06).
        hang_completions: new children hang their completions.
        ignore_term: new children ignore SIGTERM.
        spawn_fails: the next spawns raise OSError (the program cannot start).
        footprint_mib: memory each new child holds, MiB (see `memory`).
        exit_s: new children take this long to exit after SIGTERM (a slow exit).
        release_s: a child's memory comes back this long after its exit (None: never).
        stream: how new children stream completions (death mid-stream, never ending).
        occupied: ports a foreign program listens on (the port check says taken).
        exposed: pids that the socket table shows listening beyond loopback.
        children: every child ever spawned, oldest first.
        requests: (port, method, path) of every HTTP request, in order.
    """

    load_s: float | None = 0.0
    hang_completions: bool = False
    ignore_term: bool = False
    spawn_fails: bool = False
    footprint_mib: float = 0.0
    exit_s: float = 0.0
    release_s: float | None = 0.0
    stream: FakeStream = FakeStream()  # noqa: RUF009  (frozen value)
    occupied: set[int] = attrs.Factory(set)
    exposed: set[int] = attrs.Factory(set)
    children: list[FakeChild] = attrs.Factory(list)
    requests: list[tuple[int, str, str]] = attrs.Factory(list)

    def transport(self) -> httpx.MockTransport:
        """An httpx transport to the fleet's fake servers (by port), for a client that
        talks to them as the front door's upstream client does."""
        return httpx.MockTransport(self._handle)

    def edges(self, *, jitter: float = 0.0, measure_loop_lag: bool = False) -> Edges:
        """Runtime edges backed by this fleet; ``jitter`` is what the random source returns;
        ``measure_loop_lag`` (`Edges.measure_loop_lag`): False for trio's ``MockClock``,
        whose jumps would read as stalls of the loop; True under the real clock."""
        transport = self.transport()
        return Edges(
            open_prober=http_prober_factory(transport),
            net=_FakeNet(self),
            open_process=self._open_process,
            port_in_use=self._port_in_use,
            random=lambda: jitter,
            containment=_FakeContainment(),
            file_work=_inline,
            measure_loop_lag=measure_loop_lag,
        )

    def memory(self, *, total_mib: float = 16384.0, foreign_mib: float = 0.0) -> FakeMemory:
        """A memory gauge of a machine with ``total_mib`` MiB, of which other programs
        hold ``foreign_mib`` and each child what it `holds` (its footprint, also after a
        slow release), for the front door's ledger under MockClock."""
        return FakeMemory(lambda: self.children, int(total_mib * MiB), int(foreign_mib * MiB))

    @property
    def live(self) -> list[FakeChild]:
        """Children still alive."""
        return [child for child in self.children if child.alive]

    @property
    def last(self) -> FakeChild:
        """The newest child."""
        return self.children[-1]

    async def _open_process(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None = None,
        pass_fds: Sequence[int] = (),
    ) -> FakeChild:
        await trio.lowlevel.checkpoint()
        if self.spawn_fails:
            raise OSError("fake: the program cannot start")
        now = trio.current_time()
        child = FakeChild(
            pid=_FIRST_FAKE_PID + len(self.children),
            argv=tuple(argv),
            port=_port_of(argv),
            started_at=now,
            ready_at=None if self.load_s is None else now + self.load_s,
            hang_completions=self.hang_completions,
            ignore_term=self.ignore_term,
            footprint_bytes=int(self.footprint_mib * MiB),
            exit_s=self.exit_s,
            release_s=self.release_s,
            stream=self.stream,
        )
        self.children.append(child)
        return child

    async def _port_in_use(self, host: str, port: int) -> bool:
        await trio.lowlevel.checkpoint()
        return port in self.occupied or any(c.port == port for c in self.live)

    def _child_on(self, port: int) -> FakeChild | None:
        for child in reversed(self.children):
            if child.port == port and child.alive:
                return child
        return None

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        port = request.url.port or 80
        self.requests.append((port, request.method, request.url.path))
        child = self._child_on(port)
        if child is None:
            raise httpx.ConnectError("fake: connection refused", request=request)
        ready = child.ready_at is not None and trio.current_time() >= child.ready_at
        return await _answer(child, request, ready)


async def _answer(child: FakeChild, request: httpx.Request, ready: bool) -> httpx.Response:
    path = request.url.path
    if path == "/health":
        if child.dead_generator:
            return httpx.Response(503, json={"status": "unavailable"})
        if ready:
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(503, json={"error": {"code": 503, "message": "Loading model"}})
    if path == "/v1/models":
        return httpx.Response(200, json={"object": "list", "data": [{"id": _model_of(child)}]})
    if path == "/v1/chat/completions" and ready:
        if child.hang_completions:
            await trio.sleep_forever()
        if streaming(request):
            return stream_response(child, child.stream)
        body = {"choices": [{"message": {"content": " word"}, "finish_reason": "length"}]}
        return httpx.Response(200, content=json.dumps(body).encode())
    return httpx.Response(503, json={"error": {"code": 503, "message": "Loading model"}})


@attrs.frozen
class _FakeContainment:
    """An unprivileged supervisor with nothing to check: fake servers read no files."""

    def euid(self) -> int:
        return 1000

    async def prepare(self, launch: Launch, run_as: RunAs | None, files: Sequence[Path]) -> None:
        await trio.lowlevel.checkpoint()

    async def record(self, launch: Launch, pid: int, port: int) -> None:
        await trio.lowlevel.checkpoint()

    async def refresh(self, launch: Launch, pid: int) -> None:
        await trio.lowlevel.checkpoint()

    async def forget(self, launch: Launch, pid: int) -> None:
        await trio.lowlevel.checkpoint()


@attrs.frozen
class _FakeNet:
    fleet: FakeFleet

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        """Every `EXPOSURE_TICK_S` of trio time, "maybe changed": each watch scans its
        server on that grid (the fleet's `exposed` set is read by `scan`)."""
        await trio.sleep_until(min(deadline, next_tick(trio.current_time(), EXPOSURE_TICK_S)))
        return generation + 1

    async def scan(self, pid: int, port: int) -> Exposure | None:
        await trio.lowlevel.checkpoint()
        if pid in self.fleet.exposed:
            return Exposure(reachable_on=("127.0.0.2",), listeners=(), port=port)
        return None

    async def port_owner(self, host: str, port: int) -> int | None:
        await trio.lowlevel.checkpoint()
        child = self.fleet._child_on(port)
        return None if child is None else child.pid

    async def tree_owner(self, pid: int, host: str, port: int) -> int | None:
        await trio.lowlevel.checkpoint()
        child = self.fleet._child_on(port)
        return pid if child is not None and child.pid == pid else None

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        return pid == group_pgid

    async def listeners_on(self, port: int) -> tuple[Listener, ...]:
        await trio.lowlevel.checkpoint()
        return ()  # a fake child listens where it is probed, never on the other family

    async def port_exposure(self, port: int) -> Exposure | None:
        await trio.lowlevel.checkpoint()
        return None  # fakes are managed: their exposure comes from `scan`


def _port_of(argv: Sequence[str]) -> int:
    return int(argv[list(argv).index("--port") + 1]) if "--port" in argv else 0


def _model_of(child: FakeChild) -> str:
    argv = list(child.argv)
    for flag in ("--alias", "-m"):  # llama-server lists its alias, else its -m path
        if flag in argv:
            return Path(argv[argv.index(flag) + 1]).name
    return "model"


async def _inline(work: Callable[[], T]) -> T:
    """`Edges.file_work` run in the trio thread: MockClock time cannot leap meanwhile (the
    fleet's model files are tiny)."""
    await trio.lowlevel.checkpoint()
    return work()
