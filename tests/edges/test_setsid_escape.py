"""Tests of issue 8 item 8, "a descendant leaves our process group": a server started
through ``setsid llama-server "$@" & wait`` (llama-swap #804; ``tests/helpers/setsid_wrapper.sh``)
runs in a session and group of its own, out of reach of a signal to our group.

It is tracked by pid (a pidfd, ``_edges/escapees.py``): a stop gives it the grace and
SIGKILLs it after, the evidence says whether anything survived, the status says it left
its group, and after a supervisor SIGKILL the next runtime reaps it from its record.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from edges.orphan_wrapper_support import reap_in_next_runtime, sigkill_recording_runtime
from edges.process_support import GRACEFUL, HELPERS, PYTHON, Launch, linux_only, wait_for_file
from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ServeArgs,
    open_runtime,
)
from inferactors._edges.netcheck import port_in_use
from inferactors._edges.orphan_record import OrphanRecord, find_orphans
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.process import ManagedProcess
from inferactors.testing import fake_server_argv
from proc_checks import is_gone
from support import Unprivileged

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]

WRAPPER = HELPERS / "setsid_wrapper.sh"


def setsid_launch(cwd: Path, *command: str) -> Launch:
    return Launch(Path("/bin/sh"), (str(WRAPPER), str(cwd / "server.pid"), *command), cwd)


async def wait_listening(port: int, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while not await port_in_use("127.0.0.1", port):  # noqa: ASYNC110  OS state
            await trio.sleep(0.02)


async def test_stop_reaches_a_fake_server_that_left_the_group(
    tmp_path: Path, nursery: trio.Nursery, free_port: int
) -> None:
    launch = setsid_launch(tmp_path, *fake_server_argv(free_port))
    process = await ManagedProcess.spawn(nursery, launch)
    server = int(await wait_for_file(tmp_path / "server.pid"))
    await wait_listening(free_port)
    assert os.getpgid(server) != process.pgid, "the wrapper did not leave the group"
    assert process.track_descendants() == (server,)
    evidence = await process.terminate(3.0)
    assert is_gone(server), "the escaped server outlived the stop"
    assert not await port_in_use("127.0.0.1", free_port)
    assert evidence.escaped == (server,)
    assert evidence.survivors == ()
    assert "survived" not in evidence.describe()


async def test_the_escaped_server_gets_the_grace(tmp_path: Path, nursery: trio.Nursery) -> None:
    process = await ManagedProcess.spawn(nursery, setsid_launch(tmp_path, PYTHON, "-c", GRACEFUL))
    server = int(await wait_for_file(tmp_path / "server.pid"))
    await wait_for_file(tmp_path / "ready")
    asked = trio.current_time()
    evidence = await process.terminate(5.0)  # finds the escapee itself, right before the stop
    took_s = trio.current_time() - asked
    assert (tmp_path / "clean").exists(), "the escaped server was killed before it finished"
    assert not evidence.killed_after_grace
    assert 0.5 <= took_s < 3.0
    assert is_gone(server)


async def test_an_escaped_server_ignoring_sigterm_is_killed_after_the_whole_grace(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    helper = str(HELPERS / "ignore_term.py")
    process = await ManagedProcess.spawn(nursery, setsid_launch(tmp_path, PYTHON, helper))
    server = int(await wait_for_file(tmp_path / "server.pid"))
    await wait_for_file(tmp_path / "ready")
    asked = trio.current_time()
    evidence = await process.terminate(1.0)
    took_s = trio.current_time() - asked
    assert evidence.killed_after_grace
    assert 1.0 <= took_s < 3.0
    assert is_gone(server)
    assert evidence.survivors == ()


def wrapped_llama_server(server_dir: Path, llama_server: Path) -> Path:
    program = server_dir / "setsid-llama-server"
    program.write_text(f'#!/bin/sh\nexec /bin/sh {WRAPPER} server.pid {llama_server} "$@"\n')
    program.chmod(0o755)
    return program


async def test_a_runtime_stop_leaves_no_real_llama_server_listening(
    server_dir: Path,
    registry_path: Path,
    llama_server: Path,
    unprivileged: Unprivileged,
    free_port: int,
) -> None:
    program = wrapped_llama_server(server_dir, llama_server)
    managed = ManagedConfig(
        registry=registry_path, data_root=server_dir / "state", serve_program=program,
        run_as=unprivileged.run_as, readiness_timeout_s=30,
    )  # fmt: skip
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=free_port)
    )
    config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    async with open_runtime(config, node_id="esc", stop_grace_s=3) as runtime:
        handle = await runtime.load(spec)
        await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert status.pid is not None
        server = int(await wait_for_file(server_dir / "state" / handle.instance_id / "server.pid"))
        status = runtime.status(handle)
        assert f"server left its process group; inferactors tracks it by pid ({server})" in (
            status.detail or ""
        )
        evidence = await runtime.stop(handle, 3.0)
        assert is_gone(server), "the real llama-server outlived the stop"
        assert not await port_in_use("127.0.0.1", free_port)
        assert evidence.escaped == (server,)
        assert evidence.survivors == ()
        assert (runtime.status(handle)).detail == "stopped on request"


def wait_escaped(data_root: Path, timeout_s: float = 60.0) -> tuple[OrphanRecord, int]:
    """Wait until a record under ``data_root`` lists an escaped descendant (blocking)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in find_orphans(data_root):
            if record.escaped:
                return record, record.escaped[0][0]
        time.sleep(0.05)
    raise AssertionError(f"no record under {data_root} listed the escaped server")


async def test_after_a_supervisor_sigkill_the_next_runtime_reaps_the_escaped_server(
    server_dir: Path,
    registry_path: Path,
    llama_server: Path,
    unprivileged: Unprivileged,
    free_port: int,
) -> None:
    program = wrapped_llama_server(server_dir, llama_server)
    found = await sigkill_recording_runtime(
        registry_path, program, free_port, unprivileged, wait_escaped
    )
    leader, record, server = found
    assert not is_gone(server), "the escaped server should have outlived its supervisor"
    assert os.getpgid(server) != record.pgid
    reaped = await reap_in_next_runtime(registry_path, program, unprivileged)
    assert (reaped.pid, reaped.outcome) == (leader, OrphanOutcome.KILLED)
    assert reaped.detail == "orphaned; its escaped descendants ended by SIGTERM"
    assert is_gone(server)
    assert not await port_in_use("127.0.0.1", free_port)
