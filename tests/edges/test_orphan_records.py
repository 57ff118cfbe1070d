"""Tests of server records (issue 3 item 7): what `write_record` writes and refuses, how
`remove_record` and `find_orphans` read them back, that a clock step keeps a process's
identity, and that records which cannot be trusted are ignored and kept.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edges.orphans_support import PORT, record_by_dead_supervisor
from inferactors._edges.orphan_record import RECORD_NAME, find_orphans, remove_record, write_record
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import reap_orphans
from inferactors._edges.proctable import START_TOLERANCE_S, ProcessStart

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


def test_write_record_records_identity_and_reads_back(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = write_record(instance_dir, sleeper.pid, PORT, ["/bin/sleep", "600"])
    assert record is not None
    assert (record.pid, record.pgid, record.port) == (sleeper.pid, sleeper.pid, PORT)
    assert record.argv == ("/bin/sleep", "600")
    assert record.create_time == psutil.Process(sleeper.pid).create_time()
    assert record.supervisor_pid == os.getpid()
    assert record.supervisor_create_time == psutil.Process().create_time()
    assert os.listdir(instance_dir) == [RECORD_NAME]  # the staging file was renamed
    info = (instance_dir / RECORD_NAME).stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o600)
    assert find_orphans(instance_dir.parent) == [record]


def test_remove_record_checks_the_pid_when_given(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    write_record(instance_dir, sleeper.pid, PORT, ["sleep"])
    assert not remove_record(instance_dir, pid=sleeper.pid + 1)
    assert (instance_dir / RECORD_NAME).exists()
    assert remove_record(instance_dir, pid=sleeper.pid)
    assert not remove_record(instance_dir)
    assert find_orphans(instance_dir.parent) == []


def test_write_record_of_a_gone_process_writes_nothing(instance_dir: Path) -> None:
    done = subprocess.Popen(["/bin/true"])
    assert done.wait() == 0  # exited and reaped: its pid names no process now
    assert write_record(instance_dir, done.pid, PORT, ["/bin/true"]) is None
    assert os.listdir(instance_dir) == []


def test_write_record_replaces_a_planted_link_without_following_it(
    instance_dir: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (instance_dir / RECORD_NAME).symlink_to(victim)
    assert write_record(instance_dir, sleeper.pid, PORT, ["sleep"]) is not None
    assert victim.read_text() == "precious"
    assert not (instance_dir / RECORD_NAME).is_symlink()


def test_find_orphans_reads_every_instance_dir(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    for name in ("b-dir", "a-dir"):
        (tmp_path / name).mkdir()
        write_record(tmp_path / name, sleeper.pid, PORT, ["sleep"])
    found = find_orphans(tmp_path)
    assert [record.path.parent.name for record in found] == ["a-dir", "b-dir"]
    assert find_orphans(tmp_path / "missing") == []


@given(
    start=st.floats(min_value=0, max_value=1e6),
    boot=st.floats(min_value=1e9, max_value=2e9),
    step=st.floats(min_value=-1e4, max_value=1e4),
)
def test_a_clock_step_keeps_identity_but_another_start_does_not(
    start: float, boot: float, step: float
) -> None:
    recorded = ProcessStart(7, 7, boot + start, boot)
    stepped = ProcessStart(7, 7, boot + step + start, boot + step)
    assert stepped.started_as(recorded.create_time, recorded.boot_time)
    later = ProcessStart(7, 7, boot + start + 10 * START_TOLERANCE_S, boot)
    assert not later.started_as(recorded.create_time, recorded.boot_time)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_records_that_cannot_be_trusted_are_ignored_and_kept(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    records = []
    for name in ("a-chowned", "b-group-writable", "c-garbage", "d-fifo", "e-link"):
        (tmp_path / name).mkdir()
        records.append(tmp_path / name / RECORD_NAME)
    record_by_dead_supervisor(tmp_path / "a-chowned", sleeper.pid)
    os.chown(records[0], 65534, 65534)  # as a server running as nobody could forge it
    record_by_dead_supervisor(tmp_path / "b-group-writable", sleeper.pid)
    records[1].chmod(0o620)
    records[2].write_text('{"schema": "something.else"}')
    records[2].chmod(0o600)
    os.mkfifo(records[3])
    records[4].symlink_to(records[1])
    assert find_orphans(tmp_path) == []
    report = reap_orphans(tmp_path, grace_s=0.1)
    assert [(line.outcome, line.pid) for line in report] == [(OrphanOutcome.IGNORED, None)] * 5
    assert [line.detail for line in report] == [
        "the record is owned by uid 65534, not by this supervisor's user",
        "the record is writable by others (mode 0620)",
        "unreadable record: not a record of schema inferactors.server-record.v1",
        "the record is not a regular file",
        "cannot open the record: Too many levels of symbolic links",
    ]
    assert sleeper.poll() is None
    assert all(os.path.lexists(path) for path in records)
