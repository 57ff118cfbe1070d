"""Tests of the orphan reaper on real processes: an orphan whose supervisor died is killed
(after the grace if it ignores SIGTERM), while a recycled pid, a record from another boot, a
server that has exited and a server whose supervisor still runs are never signalled.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from edges.orphans_support import PORT, edit_record, record_by_dead_supervisor, wait_until
from edges.process_support import HELPERS, PYTHON
from inferactors._edges.orphan_record import RECORD_NAME, write_record
from inferactors._edges.orphan_report import OrphanOutcome, ReapedOrphan
from inferactors._edges.orphans import KILL_BOUND_S, reap_orphans

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


def test_reap_kills_an_orphan_whose_supervisor_died(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = record_by_dead_supervisor(instance_dir, sleeper.pid)
    report = reap_orphans(instance_dir.parent, grace_s=5.0)
    detail = f"orphaned; group {sleeper.pid} ended by SIGTERM"
    assert report == [ReapedOrphan(record.path, sleeper.pid, PORT, OrphanOutcome.KILLED, detail)]
    assert (report[0].pgid, report[0].program) == (record.pgid, record.argv[0])
    assert sleeper.wait(timeout=5.0) == -signal.SIGTERM
    assert not record.path.exists()


def test_reap_kills_an_orphan_that_ignores_sigterm_after_the_grace(instance_dir: Path) -> None:
    stubborn = subprocess.Popen(
        [PYTHON, str(HELPERS / "ignore_term.py")], cwd=instance_dir, start_new_session=True
    )
    try:
        wait_until((instance_dir / "ready").exists)
        record_by_dead_supervisor(instance_dir, stubborn.pid)
        started = time.monotonic()
        [report] = reap_orphans(instance_dir.parent, grace_s=0.3)
        took = time.monotonic() - started
        assert report.outcome is OrphanOutcome.KILLED
        assert report.detail == f"orphaned; group {stubborn.pid} ended by SIGKILL after 0.3 s"
        assert 0.3 <= took < 0.3 + KILL_BOUND_S
        assert stubborn.wait(timeout=5.0) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()


def test_a_recycled_pid_is_never_killed(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = record_by_dead_supervisor(instance_dir, sleeper.pid)
    edit_record(record.path, create_time=record.create_time - 100.0)
    [report] = reap_orphans(instance_dir.parent, grace_s=0.1)
    assert report.outcome is OrphanOutcome.STALE
    assert report.detail == f"pid {sleeper.pid} now belongs to another process"
    time.sleep(0.2)
    assert sleeper.poll() is None  # untouched
    assert not record.path.exists()


def test_a_record_from_another_boot_is_stale(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = record_by_dead_supervisor(instance_dir, sleeper.pid)
    edit_record(record.path, boot_id="00000000-0000-0000-0000-000000000000")
    [report] = reap_orphans(instance_dir.parent, grace_s=0.1)
    assert (report.outcome, report.detail) == (
        OrphanOutcome.STALE,
        "recorded before the last reboot",
    )
    assert sleeper.poll() is None


def test_a_gone_server_is_reported_stale_and_its_record_removed(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = record_by_dead_supervisor(instance_dir, sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    [report] = reap_orphans(instance_dir.parent)
    assert report == ReapedOrphan(
        record.path, sleeper.pid, PORT, OrphanOutcome.STALE, f"server {sleeper.pid} has exited"
    )
    assert not record.path.exists()


def test_a_server_whose_supervisor_lives_is_left_alone(
    instance_dir: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "from inferactors._edges.orphan_record import *\n"
        "write_record(Path(sys.argv[1]), int(sys.argv[2]), 1, ['sleep'])\n"
        "Path(sys.argv[3]).touch(); time.sleep(600)"
    )
    ready = tmp_path / "written"
    args = [PYTHON, "-c", code, str(instance_dir), str(sleeper.pid), str(ready)]
    supervisor = subprocess.Popen(args)
    try:
        wait_until(ready.exists)
        [report] = reap_orphans(instance_dir.parent, grace_s=0.1)
        assert report.outcome is OrphanOutcome.ALIVE
        assert report.detail == f"its supervisor, process {supervisor.pid}, is still running"
        assert sleeper.poll() is None
        assert (instance_dir / RECORD_NAME).exists()
    finally:
        supervisor.kill()
        supervisor.wait()


def test_our_own_servers_are_left_alone_but_an_earlier_life_with_our_pid_is_reaped(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = write_record(instance_dir, sleeper.pid, PORT, ["sleep"])
    assert record is not None
    [mine] = reap_orphans(instance_dir.parent, grace_s=0.1)
    assert (mine.outcome, mine.detail) == (OrphanOutcome.ALIVE, "started by this supervisor")
    assert sleeper.poll() is None
    # a supervisor that is pid 1 in every container life: same pid, another start
    edit_record(record.path, supervisor_create_time=record.supervisor_create_time - 60.0)
    [earlier] = reap_orphans(instance_dir.parent, grace_s=5.0)
    assert earlier.outcome is OrphanOutcome.KILLED
    assert sleeper.wait(timeout=5.0) == -signal.SIGTERM
