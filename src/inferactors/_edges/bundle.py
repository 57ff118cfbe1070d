"""The I/O edges of a runtime, in one swappable bundle.

Every piece of the outside world the actor tree touches goes through one of these: the
HTTP probe client, the socket tables and exposure connects, the process spawner, the
occupied-port check, and the random source of restart jitter. Tests swap any of them
(`inferactors.testing.FakeProcesses` with trio's ``MockClock``, ``httpx.MockTransport``
behind `http_prober_factory`), and the supervision logic cannot tell.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

import attrs
import httpx
import trio

from .._errors import BackendError
from .._policy.launch import Launch
from .._policy.privilege import RunAs
from .containment import check_reachable, prepare_instance_dir
from .log_ring import LogBook
from .netcheck import port_in_use
from .netscan import NetScanner, SystemNetScanner
from .orphan_record import refresh_record, remove_record, write_record
from .probe import ProbeClient, Prober, ProberFactory
from .process import OpenProcess, open_child_process
from .proctable import ProcessTable, SystemProcessTable
from .serve_help import ServeHelp

T = TypeVar("T")

PortCheck = Callable[[str, int], Awaitable[bool]]
"""``await check(host, port)``: whether a server binding there would find the port taken."""


@attrs.frozen
class ProbeTimed:
    """One probe report applied to an instance: how long it took (float seconds), at trio
    time ``at``. A measurement, not a change of state: it goes to `Edges.on_probe`, not to
    the event stream, which would otherwise carry one per instance per second."""

    instance_id: str
    latency_s: float
    at: float


def ignore_probe(timed: ProbeTimed) -> None:
    """The default `Edges.on_probe`: nothing is measured."""


class FileWork(Protocol):
    """Runs blocking file work (checking a model's pins, which may re-hash gigabytes) off
    the event loop and returns its result: `in_worker_thread` is the real one."""

    async def __call__(self, work: Callable[[], T]) -> T: ...


async def in_worker_thread(work: Callable[[], T]) -> T:
    """Run ``work`` in a trio worker thread. Cancelling waits for ``work`` to finish (a
    re-hash reads the whole file, about 1 s per GB here), so nothing it opened leaks."""
    return await trio.to_thread.run_sync(work)


class Containment(Protocol):
    """The operating system's users, permissions and server records, as a managed spawn
    needs them. The methods are async so that a fake can answer without a thread."""

    def euid(self) -> int:
        """The supervisor's effective uid."""
        ...

    async def prepare(self, launch: Launch, run_as: RunAs | None, files: Sequence[Path]) -> None:
        """Create the instance directory (``launch.cwd``), hand it to ``run_as``, and check
        that ``run_as`` can reach it, the ``files`` and the program.

        Raises:
            AdmissionRefused: a path is not reachable by ``run_as`` (the message names it).
            BackendError: the directory cannot be made or handed over.
        """
        ...

    async def record(self, launch: Launch, pid: int, port: int) -> None:
        """Write the server's ``server.json`` so a later life can reap it. Never
        raises: a record not written is a missing safety net, not a failed spawn."""
        ...

    async def refresh(self, launch: Launch, pid: int) -> None:
        """Bring that record's group members up to date while the server runs, so a
        forking wrapper's server is found again after a supervisor SIGKILL."""
        ...

    async def forget(self, launch: Launch, pid: int) -> None:
        """Remove that record once the server was reaped. Never raises (a record left behind
        is reaped as stale by a later life)."""
        ...


@attrs.frozen
class SystemContainment:
    """The real `Containment`: ``os.geteuid``, ``containment``'s checks, ``orphans``'
    records, each file operation in a worker thread."""

    def euid(self) -> int:
        return os.geteuid()

    async def prepare(self, launch: Launch, run_as: RunAs | None, files: Sequence[Path]) -> None:
        await trio.to_thread.run_sync(_prepare, launch, run_as, files)

    async def record(self, launch: Launch, pid: int, port: int) -> None:
        argv = (str(launch.program), *launch.args)
        try:
            await trio.to_thread.run_sync(write_record, launch.cwd, pid, port, argv)
        except (OSError, BackendError):
            pass  # the server runs; only the safety net for a later life is missing

    async def refresh(self, launch: Launch, pid: int) -> None:
        try:
            await trio.to_thread.run_sync(refresh_record, launch.cwd, pid)
        except (OSError, BackendError):
            pass  # as for `record`: only the safety net is missing

    async def forget(self, launch: Launch, pid: int) -> None:
        try:
            await trio.to_thread.run_sync(partial(remove_record, launch.cwd, pid=pid))
        except (OSError, BackendError):
            pass  # a record left behind is reaped as stale by a later life


def _prepare(launch: Launch, run_as: RunAs | None, files: Sequence[Path]) -> None:
    prepare_instance_dir(launch.cwd, run_as)
    for private in launch.private_dirs:
        prepare_instance_dir(private, run_as)
    if run_as is not None:
        check_reachable(run_as, directory=launch.cwd, files=files, program=launch.program)


def http_prober_factory(transport: httpx.AsyncBaseTransport | None = None) -> ProberFactory:
    """The HTTP edge: `ProbeClient` over ``transport`` (httpx's default when None)."""

    def open_prober(
        base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        return ProbeClient.open(base_url, timeout_s=timeout_s, transport=transport, headers=headers)

    return open_prober


@attrs.frozen
class Edges:
    """The I/O edges of one runtime; the defaults are the real ones.

    Attributes:
        open_prober: opens an HTTP prober for a base URL and a timeout in seconds.
        net: socket tables, listener owners and exposure connects.
        open_process: starts a server process (own session, piped output).
        port_in_use: the occupied-port check (a bind on the host's footprint).
        random: values in [0, 1) for restart jitter.
        containment: users and permissions (root refusal, run_as reachability).
        process_table: who a pid is now (whether a silent server is stopped by a signal).
        file_work: where blocking file work runs (a worker thread; the fakes run it inline
            so that MockClock time does not leap while a thread works).
        serve_help: what each serve program's ``--help`` lists, cached by its digest.
        logs: each instance's ring of output lines (and rotating file), by instance id.
        on_probe: called (synchronously, in the actor's loop: it must not block) with each
            probe report's `ProbeTimed`; the supervisor's metrics use it.
        measure_loop_lag: whether the runtime measures its event loop's stalls
            (`loop_lag.measure_loop_lag`), so that a deadline our own loop ate gives no
            verdict. False under a virtual clock (trio's ``MockClock``), whose jumps
            inside a task step would read as stalls.
    """

    open_prober: ProberFactory = attrs.field(factory=http_prober_factory)
    net: NetScanner = attrs.field(factory=SystemNetScanner)
    open_process: OpenProcess = open_child_process
    port_in_use: PortCheck = port_in_use
    random: Callable[[], float] = random.random
    containment: Containment = attrs.field(factory=SystemContainment)
    file_work: FileWork = in_worker_thread
    process_table: ProcessTable = attrs.field(factory=SystemProcessTable)
    serve_help: ServeHelp = attrs.field(factory=ServeHelp)
    logs: LogBook = attrs.field(factory=LogBook)
    on_probe: Callable[[ProbeTimed], None] = ignore_probe
    measure_loop_lag: bool = True
