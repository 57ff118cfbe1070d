"""Tests of a real managed process ending on its own: the exit is noticed as it happens, its
output is captured up to the cap with exact counts, a crashed leader's group goes with it,
and stopping a process that already exited repeats the evidence without signalling.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio

from edges.process_support import python_launch, wait_gone, wait_group_empty, wrapper_launch
from inferactors._edges.process import ManagedProcess

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


@pytest.mark.exclusive  # noticed within 0.1 s of real time
async def test_exit_on_its_own_is_noticed_as_it_happens(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = "import os,time; print(time.perf_counter(), flush=True); os._exit(3)"
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    await trio.sleep(1.0)  # nobody waits on the process meanwhile
    assert not process.running
    assert process.returncode == 3
    evidence = await process.wait_exited()
    assert evidence.exit_code == 3
    assert evidence.signal is None
    assert evidence.describe() == "exited with status 3"
    exited_at = float(evidence.stdout)
    trio_clock_offset = trio.current_time() - time.perf_counter()
    noticed_at = process.started_at + evidence.elapsed_s - trio_clock_offset
    assert 0.0 <= noticed_at - exited_at < 0.1


async def test_output_is_capped_at_one_mib_with_exact_counts(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = (
        "import sys\n"
        "data = b''.join(b'%07d\\n' % i for i in range(262144))\n"
        "sys.stdout.buffer.write(data)\n"
        "sys.stderr.buffer.write(b'short complaint\\n')\n"
    )
    expected = b"".join(b"%07d\n" % i for i in range(262144))
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    evidence = await process.wait_exited()
    assert evidence.exit_code == 0
    assert evidence.stdout_bytes == len(expected) == 2 << 20
    assert evidence.stdout == expected[: 1 << 20]
    assert evidence.stdout_tail == expected[-4096:].decode()
    assert evidence.truncated
    assert evidence.stderr == b"short complaint\n"
    assert evidence.stderr_bytes == 16
    assert evidence.stderr_tail == "short complaint\n"
    assert evidence.output_eof


async def test_checklist_52_crashed_leader_takes_its_grandchild_along(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, wrapper_launch(tmp_path, "crash", "sleep", "600"))
    evidence = await process.wait_exited()
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert evidence.signal == signal.SIGABRT
    assert evidence.describe() == "killed by SIGABRT"
    await wait_gone(grandchild)
    await wait_group_empty(process.pgid)
    assert evidence.output_eof


async def test_terminate_after_exit_signals_nothing_and_repeats_the_evidence(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, "raise SystemExit(5)"))
    evidence = await process.wait_exited()
    again = await process.terminate(grace_s=1.0)
    assert again is evidence
    assert again.exit_code == 5
    assert not again.killed_after_grace
    assert await process.terminate(grace_s=0.0) is evidence
    process.kill_group_now()  # released group: a no-op, must not raise
