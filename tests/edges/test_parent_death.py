"""Tests of the parent-death signal (FC-13): a SIGKILLed supervisor takes its server along,
also one running as another user, and the signal is tied to the thread that forked, which
is why spawn forks in a thread that never ends (the forker, ``test_forker.py``) rather than
in a trio worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from edges.process_support import HELPERS, PYTHON, Launch, linux_only, wait_for_file, wait_gone
from inferactors._edges import spawn
from inferactors._edges.process import ManagedProcess
from proc_checks import group_members as live_group_members
from proc_checks import is_gone

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


async def sigkill_supervisor_and_see_its_server_die(tmp_path: Path, *run_as: str) -> int:
    """Run tests/helpers/supervisor.py (a real `ManagedProcess` owner), SIGKILL it, and
    wait for its server to die; returns the server's uid while it ran."""
    pid_file = tmp_path / "server.pid"
    supervisor = await trio.lowlevel.open_process(
        [PYTHON, str(HELPERS / "supervisor.py"), str(pid_file), *run_as]
    )
    try:
        server = int(await wait_for_file(pid_file))
        assert not is_gone(server)
        uid = psutil.Process(server).uids().real
    finally:
        supervisor.kill()
        await supervisor.wait()
    assert supervisor.returncode == -signal.SIGKILL
    await wait_gone(server, timeout_s=2.0)
    assert not live_group_members(server)
    return uid


@linux_only
async def test_fc13_supervisor_sigkilled_takes_its_server_along(tmp_path: Path) -> None:
    assert await sigkill_supervisor_and_see_its_server_die(tmp_path) == os.getuid()


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
async def test_fc13_a_server_run_as_nobody_still_dies_with_its_supervisor(
    tmp_path: Path,
) -> None:
    """The kernel clears the parent-death signal on a uid change; ours is set after it."""
    assert await sigkill_supervisor_and_see_its_server_die(tmp_path, "nobody") == 65534


@linux_only
async def test_pdeathsig_follows_the_forking_thread_not_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Why spawn uses the forker: a worker thread's exit would kill the child. The exec
    helper spawned here from a trio worker thread arms the signal; the thread ends."""
    monkeypatch.setattr(trio._core._thread_cache, "IDLE_TIMEOUT", 0.05)
    plan = spawn.child_plan(["/bin/sleep", "600"], tmp_path, {"PATH": "/bin"}, None, ())
    plan_r, plan_w = os.pipe()
    status_r, status_w = os.pipe()
    ends = spawn.ChildEnds(plan_r, status_w, 1, 2, ())
    encoded = json.dumps(plan).encode()
    pid = await trio.to_thread.run_sync(spawn.spawn_helper, ends, encoded, plan_w)
    for fd in (plan_r, status_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        with os.fdopen(status_r, "rb") as status:
            assert await trio.to_thread.run_sync(status.read) == b""  # it ran
        with trio.fail_after(2.0):
            await trio.lowlevel.wait_readable(pidfd)  # it exits: the thread has ended
    finally:
        os.close(pidfd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, code = await trio.to_thread.run_sync(os.waitpid, pid, 0)
    assert os.waitstatus_to_exitcode(code) == -signal.SIGKILL


@linux_only
async def test_pdeathsig_child_survives_worker_threads_ending(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery, tmp_path: Path
) -> None:
    monkeypatch.setattr(trio._core._thread_cache, "IDLE_TIMEOUT", 0.05)
    await trio.to_thread.run_sync(lambda: None)
    process = await ManagedProcess.spawn(nursery, Launch(Path("/bin/sleep"), ("600",), tmp_path))
    await trio.to_thread.run_sync(lambda: None)
    await trio.sleep(0.5)  # every worker thread has ended by now
    assert process.running
    assert not is_gone(process.pid)
    await process.terminate(grace_s=1.0)
