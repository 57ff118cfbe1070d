"""Tests of stopping a real process group: SIGTERM, then SIGKILL after the grace (FC-05,
FC-11), a forking wrapper's grandchild dying with the group (FC-12), an immediate group
kill, and a cancelled stop or a torn-down nursery still killing and reaping everything.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from edges.process_support import (
    HELPERS,
    PYTHON,
    Launch,
    wait_for_file,
    wait_gone,
    wait_group_empty,
    wrapper_launch,
)
from inferactors._edges.process import ManagedProcess
from proc_checks import is_gone

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


async def test_terminate_stops_a_sleeper_with_sigterm(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, Launch(Path("/bin/sleep"), ("600",), tmp_path))
    await trio.sleep(0.05)
    assert process.running
    started = trio.current_time()
    evidence = await process.terminate(grace_s=5.0)
    assert trio.current_time() - started < 1.0
    assert evidence.signal == signal.SIGTERM
    assert evidence.exit_code is None
    assert not evidence.killed_after_grace
    assert evidence.args == ("600",)
    assert evidence.pid == process.pid
    assert is_gone(process.pid)
    with pytest.raises(ProcessLookupError):  # reaped and alone: the group no longer exists
        os.killpg(process.pgid, 0)


async def test_fc05_fc11_sigterm_ignored_is_killed_after_grace(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = Launch(Path(PYTHON), (str(HELPERS / "ignore_term.py"),), tmp_path)
    process = await ManagedProcess.spawn(nursery, launch)
    await wait_for_file(tmp_path / "ready")
    started = trio.current_time()
    evidence = await process.terminate(grace_s=0.5)
    took = trio.current_time() - started
    assert 0.5 <= took < 1.0
    assert evidence.signal == signal.SIGKILL
    assert evidence.killed_after_grace
    assert evidence.describe() == "killed by SIGKILL after the grace period"
    assert is_gone(process.pid)


async def test_fc12_forking_wrapper_grandchild_dies_with_the_group(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, str(HELPERS / "ignore_term.py"))
    process = await ManagedProcess.spawn(nursery, launch)
    grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
    await wait_for_file(tmp_path / "ready")
    assert os.getpgid(grandchild) == process.pgid
    evidence = await process.terminate(grace_s=5.0)
    assert evidence.signal == signal.SIGTERM  # the wrapper itself obeyed SIGTERM
    await wait_gone(grandchild)  # the grandchild ignored SIGTERM but got the group's SIGKILL
    await wait_group_empty(process.pgid)
    assert evidence.output_eof  # both pipes reached EOF: no member holds them any more
    assert evidence.stdout == b"wrapper-out\n"
    assert evidence.stderr == b"wrapper-err\n"


async def test_kill_group_now_kills_a_running_group(nursery: trio.Nursery, tmp_path: Path) -> None:
    process = await ManagedProcess.spawn(nursery, wrapper_launch(tmp_path, "wait", "sleep", "600"))
    grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
    assert process.running
    assert process.returncode is None
    process.kill_group_now()
    evidence = await process.wait_exited()
    assert evidence.signal == signal.SIGKILL
    assert not evidence.killed_after_grace  # no stop asked for it
    await wait_gone(grandchild)


async def test_cancelling_terminate_still_kills_and_reaps(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = Launch(Path(PYTHON), (str(HELPERS / "ignore_term.py"),), tmp_path)
    process = await ManagedProcess.spawn(nursery, launch)
    await wait_for_file(tmp_path / "ready")
    started = trio.current_time()
    with trio.move_on_after(0.2) as scope:
        await process.terminate(grace_s=30.0)
    assert scope.cancelled_caught
    assert trio.current_time() - started < 2.0
    assert process.returncode == -signal.SIGKILL
    assert is_gone(process.pid)
    evidence = await process.wait_exited()
    assert evidence.killed_after_grace


async def test_checklist_61_nursery_teardown_kills_the_group(tmp_path: Path) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, str(HELPERS / "ignore_term.py"))
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch)
        grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
        nursery.cancel_scope.cancel()
    assert process.returncode == -signal.SIGKILL
    await wait_gone(grandchild)
    await wait_group_empty(process.pgid)
    assert (await process.wait_exited()).signal == signal.SIGKILL
