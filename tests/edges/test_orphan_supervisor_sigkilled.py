"""Tests of FC-13 end to end: a real recording supervisor is SIGKILLed; its server dies of
the parent-death signal and the record is then stale, while a forking wrapper's grandchild
outlives the signal and is reaped, or is reported, not signalled, once its leader's pid is free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from edges.orphans_support import PORT, edit_record, wait_until
from edges.process_support import HELPERS, PYTHON, linux_only
from inferactors._edges.orphan_record import OrphanRecord, find_orphans
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import reap_orphans
from proc_checks import is_gone

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


def start_recording_supervisor(instance_dir: Path, *argv: str) -> subprocess.Popen[bytes]:
    args = [PYTHON, str(HELPERS / "recording_supervisor.py"), str(instance_dir), str(PORT)]
    return subprocess.Popen([*args, *argv])


def wait_for_record(instance_dir: Path) -> OrphanRecord:
    wait_until(lambda: bool(find_orphans(instance_dir.parent)))
    [record] = find_orphans(instance_dir.parent)
    return record


def kill_and_wait(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    assert process.wait() == -signal.SIGKILL


def sigkill_wrapper_supervisor(instance_dir: Path) -> tuple[OrphanRecord, int]:
    """Start a recording supervisor of a forking wrapper (``fork_wrapper.sh wait``) over
    ``sleep 600``, wait for its record and the grandchild's pid, SIGKILL the supervisor;
    return the record and the grandchild."""
    pid_file = instance_dir / "grandchild.pid"
    wrapper = ["/bin/sh", str(HELPERS / "fork_wrapper.sh"), "wait", str(pid_file)]
    supervisor = start_recording_supervisor(instance_dir, *wrapper, "/bin/sleep", "600")
    try:
        record = wait_for_record(instance_dir)
        wait_until(pid_file.exists)
        return record, int(pid_file.read_text())
    finally:
        kill_and_wait(supervisor)


@linux_only
def test_fc13_sigkilled_supervisor_no_server_outlives_it_and_the_record_is_stale(
    instance_dir: Path,
) -> None:
    supervisor = start_recording_supervisor(instance_dir, "/bin/sleep", "600")
    try:
        record = wait_for_record(instance_dir)
        assert not is_gone(record.pid)
    finally:
        kill_and_wait(supervisor)
    wait_until(lambda: is_gone(record.pid), timeout_s=5.0)  # the parent-death signal
    [report] = reap_orphans(instance_dir.parent)
    assert (report.pid, report.outcome) == (record.pid, OrphanOutcome.STALE)
    assert not record.path.exists()


@linux_only
def test_fc12_fc13_a_wrapper_grandchild_outlives_the_death_signal_and_is_reaped(
    instance_dir: Path,
) -> None:
    record, grandchild = sigkill_wrapper_supervisor(instance_dir)
    wait_until(lambda: is_gone(record.pid), timeout_s=5.0)  # the wrapper got the signal ...
    time.sleep(0.1)
    assert not is_gone(grandchild)  # ... but the signal does not pass to a grandchild
    [report] = reap_orphans(instance_dir.parent, grace_s=5.0)  # the wrapper is a zombie here
    assert report.outcome is OrphanOutcome.KILLED
    wait_until(lambda: is_gone(grandchild), timeout_s=5.0)


@linux_only
def test_fc12_fc13_a_group_whose_leader_was_reaped_is_reported_not_signalled(
    instance_dir: Path,
) -> None:
    record, grandchild = sigkill_wrapper_supervisor(instance_dir)
    os.waitpid(record.pid, 0)  # as an init that reaps would: the leader's pid is free now
    # No member recorded (a record from before issue 8, or a fork after the last refresh;
    # the recorded members prove a group ours: tests/edges/test_fork_wrapper_stop.py).
    edit_record(record.path, members=[])
    [report] = reap_orphans(instance_dir.parent, grace_s=0.1)
    assert report.outcome is OrphanOutcome.ALIVE
    assert report.detail == (
        f"its leader {record.pid} is gone but process group {record.pgid} still holds "
        f"{grandchild}; not signalled, since the group cannot be proven to be the server's"
    )
    assert not is_gone(grandchild)
    assert record.path.exists()
    os.kill(grandchild, signal.SIGKILL)
    os.waitpid(grandchild, 0)
