"""Field cases against real processes: orphans, occupied ports, impostors, exposure (issue 3).

FC-13, FC-14 and FC-15 of /work/shared/reference/field-cases.md (harness:
``test_field_cases``). Servers that a test starts itself (foreign listeners, an earlier
life's orphan) are killed in a ``finally``; the exposure connect check only ever goes to
`LAN_ADDRESS`, a loopback address of this test process's own (``INFERACTORS_LAN_ADDRESSES``,
set by conftest).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import psutil
import pytest
import trio

from e2e.field_support import (
    POLL_S,
    SLACK_S,
    WAIT_S,
    Bench,
    Recorder,
    another_port,
    assert_group_gone,
    chat,
    eventually,
    policy,
    supervising,
)
from inferactors import (
    AdmissionRefused,
    BackendError,
    ExposureDetected,
    GaveUp,
    ImpostorDetected,
    InferConfig,
    InferFlavor,
    InstanceState,
    InvalidState,
    NetworkExposure,
    ProcessExited,
    ProcessStarted,
    RestartFailed,
    RestartScheduled,
    StateChanged,
    StopReason,
    open_runtime,
)
from inferactors._edges.netcheck import port_in_use
from inferactors._edges.netscan import port_owner
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors.testing._fake_faults import FakeServerFaults
from inferactors.testing._fake_server import fake_server_argv, read_request_log
from proc_checks import group_members
from support import LAN_ADDRESS, Unprivileged

HELPERS = Path(__file__).parents[1] / "helpers"
FAST_S = 1.0
"""An occupied port is refused within this (a TCP connect to a listener answers at once)."""


@pytest.fixture
def bench(unprivileged: Unprivileged, server_dir: Path, registry_path: Path) -> Bench:
    return Bench(unprivileged, server_dir, registry_path)


async def wait_listening(port: int, process: trio.Process | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""
    with trio.fail_after(WAIT_S):
        while not await port_in_use("127.0.0.1", port):
            assert process is None or process.returncode is None, "the server exited"
            await trio.sleep(POLL_S)


@asynccontextmanager
async def foreign_server(
    port: int, model: Path, *, host: str = "127.0.0.1", request_log: Path | None = None
) -> AsyncIterator[trio.Process]:
    """A fake server serving ``model`` that the test starts itself on ``host:port``, not
    through any runtime; killed (its whole group) on the way out."""
    argv = fake_server_argv(port, model=str(model), host=host, request_log=request_log)
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        await wait_listening(port, process)
        yield process
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


# FC-13: no server outlives its supervisor, and a later life reaps what an earlier one left.


async def test_fc13_a_sigkilled_supervisor_leaves_no_server_behind(
    bench: Bench, free_port: int, tmp_path: Path
) -> None:
    program = bench.program(FakeServerFaults())
    data_root = bench.root / "state"
    argv = [sys.executable, str(HELPERS / "fc_supervisor.py"), str(bench.registry)]
    argv += [str(data_root), str(program), str(free_port)]
    argv += [bench.unprivileged.run_as] if bench.unprivileged.run_as else []
    errors = tmp_path / "supervisor.err"
    server_pid: int | None = None
    with errors.open("wb") as stderr:
        supervisor = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=stderr)
    try:
        server_pid = await _read_pid(supervisor, errors)
        assert group_members(server_pid), "the server was not running"
        # The record is written just after ProcessStarted (issue 11: a start does not wait
        # for it); the case is a supervisor killed once it is there.
        assert await eventually(lambda: bool(list(data_root.glob("*/server.json"))), 5.0)
        supervisor.send_signal(signal.SIGKILL)
        await supervisor.wait()
        await assert_group_gone(server_pid)  # the parent-death signal took it down
        # Free once the kernel has closed the dead server's kept-alive connections.
        assert await eventually_async(lambda: port_in_use("127.0.0.1", free_port), False)
        assert len(list(data_root.glob("*/server.json"))) == 1  # nobody could remove it
        async with open_runtime(bench.config(program), node_id="later") as runtime:
            (found,) = runtime.reaped_orphans
        assert (found.pid, found.port, found.outcome) == (
            server_pid,
            free_port,
            OrphanOutcome.STALE,
        )
        assert not list(data_root.glob("*/server.json"))
    finally:
        supervisor.kill()
        await supervisor.wait()
        if server_pid is not None:
            with suppress(ProcessLookupError):
                os.killpg(server_pid, signal.SIGKILL)


async def eventually_async(
    check: Callable[[], Awaitable[bool]], wanted: bool, within_s: float = 5.0
) -> bool:
    """Poll the async ``check`` until it says ``wanted`` or ``within_s`` passes."""
    with trio.move_on_after(within_s):
        while await check() != wanted:  # noqa: ASYNC110  a port has no trio event
            await trio.sleep(0.05)
        return True
    return False


async def _read_pid(process: trio.Process, errors: Path) -> int:
    assert process.stdout is not None
    line = b""
    with trio.move_on_after(WAIT_S):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some()
            if not chunk:
                break
            line += chunk
    if not line.strip().isdigit():
        said = await trio.Path(errors).read_text()
        raise AssertionError(f"the supervisor printed {line!r}; its stderr: {said}")
    return int(line)


async def test_fc13_an_earlier_lifes_orphan_is_reaped_before_its_port_is_reused(
    bench: Bench, free_port: int, tiny_gguf: Path
) -> None:
    data_root = bench.root / "state"
    instance_dir = data_root / "chat-earlier-life"
    instance_dir.mkdir(parents=True)
    # No parent-death signal, and a fake that keeps serving as the orphan it must become.
    outlives = FakeServerFaults(outlive_parent=True)
    server = fake_server_argv(free_port, model=str(tiny_gguf), faults=outlives)
    helper = [sys.executable, str(HELPERS / "fc_orphan.py"), str(instance_dir), str(free_port)]
    earlier = await trio.run_process([*helper, *server], capture_stdout=True)
    orphan = int(earlier.stdout)
    try:
        assert group_members(orphan) == [orphan]  # alive, and its supervisor is gone
        program = bench.program(FakeServerFaults())
        async with supervising(bench.config(program)) as (runtime, rec):
            (found,) = runtime.reaped_orphans
            assert (found.pid, found.port, found.outcome) == (
                orphan,
                free_port,
                OrphanOutcome.KILLED,
            )
            assert "orphaned" in found.detail
            assert not (instance_dir / "server.json").exists()
            await assert_group_gone(orphan, within_s=0.1)  # before the runtime was handed out
            held = [
                c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == free_port
            ]
            assert not await port_in_use("127.0.0.1", free_port), held
            handle = await runtime.load(chat(free_port))  # its port is ours again
            await runtime.start(handle)
            await rec.state(InstanceState.RUNNING)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(orphan, signal.SIGKILL)


# FC-14: a foreign listener on our port.


async def test_fc14_an_occupied_port_is_refused_fast_at_admit_load_and_start(
    bench: Bench, free_port: int, tiny_gguf: Path
) -> None:
    async with supervising(bench.config(bench.program(FakeServerFaults()))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))  # the port was free then
        async with foreign_server(free_port, model=tiny_gguf) as foreign:
            before = trio.current_time()
            with pytest.raises(AdmissionRefused, match="already holds port"):
                await runtime.admit(chat(free_port))
            with pytest.raises(AdmissionRefused, match="already holds port"):
                await runtime.load(chat(free_port, role="other"))
            with pytest.raises(BackendError, match="already taken"):
                await runtime.start(handle)
            assert trio.current_time() - before < 3 * FAST_S
            assert foreign.returncode is None  # never signalled
        assert not rec.of(ProcessStarted)
        assert (runtime.status(handle)).state is InstanceState.LOADED


async def test_fc14_an_impostor_on_our_port_is_reported_and_never_taken_for_ours(
    bench: Bench, free_port: int, tiny_gguf: Path
) -> None:
    program = bench.program(FakeServerFaults(bind_delay_s=2.0))  # ours binds late
    async with supervising(bench.config(program, restart=policy(1))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        ours = (await rec.next(ProcessStarted)).pid
        # A foreign server, serving the same model, takes the port before ours binds it.
        async with foreign_server(free_port, model=tiny_gguf) as foreign:
            assert await trio.to_thread.run_sync(port_owner, "127.0.0.1", free_port) == (
                foreign.pid
            )
            impostor = await rec.next(ImpostorDetected)
            assert impostor.pid == foreign.pid
            status = runtime.status(handle)
            assert status.state is InstanceState.DEGRADED
            assert status.detail is not None
            assert status.detail.startswith("impostor")
            exited = await rec.next(ProcessExited)  # ours cannot bind the taken port
            assert (exited.pid, exited.reason) == (ours, StopReason.STARTUP_FAILURE)
            assert exited.diagnosis is not None  # in its own words (issue 9)
            assert exited.diagnosis.kind.value == "address in use"
            failed = await rec.next(RestartFailed)  # never restarted over an occupied port
            assert "already taken" in failed.why
            await rec.next(GaveUp)
            assert foreign.returncode is None  # never signalled
        assert not [c for c in rec.of(StateChanged) if c.new is InstanceState.RUNNING]
        assert len(rec.of(ProcessStarted)) == 1


async def test_fc14_an_impostors_token_never_makes_our_server_ready(
    bench: Bench, free_port: int, tiny_gguf: Path
) -> None:
    faults = FakeServerFaults(bind_delay_s=2.0, hang_completions=True)  # ours never answers one
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        ours = (await rec.next(ProcessStarted)).pid
        log = bench.root / "foreign.log"
        async with foreign_server(free_port, model=tiny_gguf, request_log=log):
            await eventually(lambda: bool(_posts(log)), 1.0)  # while it holds the port
        await wait_listening(free_port)  # now ours, bound once the impostor left
        assert await trio.to_thread.run_sync(port_owner, "127.0.0.1", free_port) == ours
        with trio.move_on_after(1.5):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        assert (runtime.status(handle)).state is not InstanceState.RUNNING
        assert _posts(log) == []


# FC-15: listening beyond loopback.


async def test_fc15_an_extra_port_on_all_interfaces_is_stopped_and_held_until_reload(
    bench: Bench, free_port: int
) -> None:
    extra = another_port()
    program = bench.program(FakeServerFaults(extra_port=extra, extra_host="0.0.0.0"))
    async with supervising(bench.config(program, restart=policy(2))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        exposed = await rec.next(ExposureDetected)
        assert f"0.0.0.0:{extra} (pid {started.pid})" in exposed.detail
        assert exposed.at - started.at < 0.25 + SLACK_S
        exited = await rec.next(ProcessExited)
        assert exited.reason is StopReason.EXPOSURE
        await assert_group_gone(started.pid)
        assert not await port_in_use("127.0.0.1", extra)
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "exposure")
        assert status.detail == f"stopped: {exposed.detail}"
        with pytest.raises(InvalidState, match=r"beyond loopback.*reload"):
            await runtime.start(handle)
        await trio.sleep(0.5)
        assert not rec.of(RestartScheduled)  # an exposed server is not restarted
        assert len(rec.of(ProcessStarted)) == 1

        bench.program(FakeServerFaults())  # the operator fixes the server, then reloads
        await runtime.unload(handle)
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await rec.state(InstanceState.RUNNING)


async def test_fc15_a_port_opened_on_all_interfaces_long_after_running_is_stopped(
    bench: Bench, free_port: int
) -> None:
    extra = another_port()
    faults = FakeServerFaults(extra_port=extra, extra_host="0.0.0.0", extra_after_s=3.0)
    async with supervising(bench.config(bench.program(faults))) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        await rec.state(InstanceState.RUNNING)
        running_at = trio.current_time()
        exposed = await rec.next(ExposureDetected)  # found by the runtime's LISTEN-table reads
        assert f"0.0.0.0:{extra} (pid {started.pid})" in exposed.detail
        assert exposed.at - started.at < 3.0 + 0.25 + SLACK_S
        assert trio.current_time() - running_at > 1.0  # it was Running, quiet, first
        assert (await rec.next(ProcessExited)).reason is StopReason.EXPOSURE
        await assert_group_gone(started.pid)


async def test_fc15_a_server_bound_to_all_interfaces_is_stopped(
    bench: Bench, free_port: int
) -> None:
    fake = bench.program(FakeServerFaults())
    wrapper = bench.root / "binds-everywhere"
    wrapper.write_text(f'#!/bin/sh\nexec "{fake}" "$@" --host 0.0.0.0\n')  # ignores our --host
    wrapper.chmod(0o755)
    async with supervising(bench.config(wrapper)) as (runtime, rec):
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        started = await rec.next(ProcessStarted)
        exposed = await rec.next(ExposureDetected)
        assert f"0.0.0.0:{free_port} (pid {started.pid})" in exposed.detail
        assert f"reachable on {LAN_ADDRESS}:{free_port}" in exposed.detail  # the connect check
        assert (await rec.next(ProcessExited)).reason is StopReason.EXPOSURE
        await assert_group_gone(started.pid)
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "exposure")
        with pytest.raises(InvalidState, match="reload"):
            await runtime.start(handle)


async def test_fc15_an_adopted_server_on_all_interfaces_is_reported_never_signalled(
    free_port: int, tiny_gguf: Path
) -> None:
    async with foreign_server(free_port, host="0.0.0.0", model=tiny_gguf) as server:
        config = InferConfig.adopted(InferFlavor.LLAMACPP)
        async with open_runtime(config, node_id="fc15") as runtime:
            assert runtime.network_exposure is NetworkExposure.LAN
            rec = Recorder(await runtime.subscribe())
            handle = await runtime.load(chat(free_port))
            await runtime.start(handle)
            exposed = await rec.next(ExposureDetected)
            assert f"0.0.0.0:{free_port} (pid {server.pid})" in exposed.detail
            assert "never signals" in exposed.detail
            for _ in range(4):  # longer than the managed exposure watch's 250 ms period
                status = runtime.status(handle)
                assert status.state is InstanceState.RUNNING
                assert status.detail is not None
                assert "beyond loopback" in status.detail
                await trio.sleep(0.1)
            await runtime.unload(handle)
        assert server.returncode is None  # reported only: never signalled
        assert group_members(server.pid) == [server.pid]


def _posts(log: Path) -> list[str]:
    return [request.path for request in read_request_log(log) if request.method == "POST"]
