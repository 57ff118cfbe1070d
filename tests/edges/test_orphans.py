"""Tests of the server records and the orphan reaper (issue 3 item 7, FC-13).

Real processes for everything the OS decides (identities, groups, signals, the parent-death
signal of a SIGKILLed supervisor); a fake process table with a fake clock for the exact kill
steps. The test process is made a child subreaper, so anything orphaned by a test becomes
our child: the leak check then sees every survivor, and reaps the dead.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._edges.orphan_record import (
    RECORD_NAME,
    OrphanOutcome,
    OrphanRecord,
    ReapedOrphan,
    find_orphans,
    remove_record,
    write_record,
)
from inferactors._edges.orphans import KILL_BOUND_S, reap_orphans
from inferactors._edges.proctable import START_TOLERANCE_S, ProcessStart
from proc_checks import is_gone

HELPERS = Path(__file__).parents[1] / "helpers"
PYTHON = sys.executable
PORT = 18090
_PR_SET_CHILD_SUBREAPER = 36
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _set_subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(int(on)), 0, 0, 0) == 0


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Adopt the tests' orphans; afterwards reap the dead and fail on any survivor."""
    _set_subreaper(True)
    try:
        yield
    finally:
        _set_subreaper(False)
        survivors = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    survivors.append(child)
                    child.kill()
                os.waitpid(child.pid, 0)
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
        assert survivors == [], f"processes left behind: {survivors}"


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def instance_dir(tmp_path: Path) -> Path:
    path = tmp_path / "chat-0123abcd-node"
    path.mkdir()
    return path


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """``sleep 600`` in its own session and without the parent-death signal: an orphan-to-be."""
    process = subprocess.Popen(["/bin/sleep", "600"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def record_by_dead_supervisor(instance_dir: Path, pid: int) -> OrphanRecord:
    """Have a short-lived process record ``pid``, so the record's supervisor is dead."""
    code = (
        "import sys; from pathlib import Path; "
        "from inferactors._edges.orphan_record import write_record\n"
        "write_record(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), ['sleep', '600'])"
    )
    subprocess.run([PYTHON, "-c", code, str(instance_dir), str(pid), str(PORT)], check=True)
    [record] = find_orphans(instance_dir.parent)
    assert record.pid == pid
    assert is_gone(record.supervisor_pid)
    return record


def edit_record(path: Path, **changes: object) -> None:
    """Change fields in place (same file: owner and mode stay)."""
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# --- records ----------------------------------------------------------------------------------


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


# --- reaping real processes -------------------------------------------------------------------


def test_reap_kills_an_orphan_whose_supervisor_died(
    instance_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = record_by_dead_supervisor(instance_dir, sleeper.pid)
    report = reap_orphans(instance_dir.parent, grace_s=5.0)
    detail = f"orphaned; group {sleeper.pid} ended by SIGTERM"
    assert report == [ReapedOrphan(record.path, sleeper.pid, PORT, OrphanOutcome.KILLED, detail)]
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


# --- FC-13 end to end: a real supervisor, SIGKILLed --------------------------------------------


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
    pid_file = instance_dir / "grandchild.pid"
    wrapper = ["/bin/sh", str(HELPERS / "fork_wrapper.sh"), "wait", str(pid_file)]
    supervisor = start_recording_supervisor(instance_dir, *wrapper, "/bin/sleep", "600")
    try:
        record = wait_for_record(instance_dir)
        wait_until(pid_file.exists)
        grandchild = int(pid_file.read_text())
    finally:
        kill_and_wait(supervisor)
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
    pid_file = instance_dir / "grandchild.pid"
    wrapper = ["/bin/sh", str(HELPERS / "fork_wrapper.sh"), "wait", str(pid_file)]
    supervisor = start_recording_supervisor(instance_dir, *wrapper, "/bin/sleep", "600")
    try:
        record = wait_for_record(instance_dir)
        wait_until(pid_file.exists)
        grandchild = int(pid_file.read_text())
    finally:
        kill_and_wait(supervisor)
    os.waitpid(record.pid, 0)  # as an init that reaps would: the leader's pid is free now
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


# --- the kill steps at exact times, on a fake table -------------------------------------------


@attrs.define
class FakeTable:
    """One recorded server (pid 500) and its dead supervisor; signals logged with times."""

    ignores: frozenset[int] = frozenset()
    now: float = 0.0
    alive: bool = True
    signals: list[tuple[float, int]] = attrs.field(factory=list)

    def boot_id(self) -> str:
        return "boot-1"

    def identify(self, pid: int) -> ProcessStart | None:
        return ProcessStart(500, 500, 1000.0, 900.0) if pid == 500 and self.alive else None

    def live_members(self, pgid: int) -> tuple[int, ...]:
        return (500,) if self.alive and pgid == 500 else ()

    def signal_group(self, pgid: int, signum: int) -> None:
        self.signals.append((self.now, signum))
        if signum not in self.ignores:
            self.alive = False

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def fake_record(instance_dir: Path, **changes: object) -> Path:
    data: dict[str, object] = {
        "schema": "inferactors.server-record.v1",
        "pid": 500,
        "pgid": 500,
        "create_time": 1000.0,
        "boot_time": 900.0,
        "boot_id": "boot-1",
        "port": PORT,
        "argv": ["llama-server"],
        "supervisor_pid": 499,
        "supervisor_create_time": 950.0,
        **changes,
    }
    path = instance_dir / RECORD_NAME
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def test_fake_sigterm_obeyed_sends_no_kill(instance_dir: Path) -> None:
    table = FakeTable()
    fake_record(instance_dir)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert table.signals == [(0.0, signal.SIGTERM)]
    assert report.outcome is OrphanOutcome.KILLED


def test_fake_sigterm_ignored_is_killed_exactly_after_the_grace(instance_dir: Path) -> None:
    table = FakeTable(ignores=frozenset({signal.SIGTERM}))
    fake_record(instance_dir)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert table.signals == [(0.0, signal.SIGTERM), (pytest.approx(3.0), signal.SIGKILL)]
    assert report.detail == "orphaned; group 500 ended by SIGKILL after 3 s"


def test_fake_unkillable_group_is_reported_alive_and_kept(instance_dir: Path) -> None:
    table = FakeTable(ignores=frozenset({signal.SIGTERM, signal.SIGKILL}))
    path = fake_record(instance_dir)
    [report] = reap_orphans(instance_dir.parent, grace_s=1.0, table=table)
    assert (report.outcome, report.detail) == (OrphanOutcome.ALIVE, "group 500 survived SIGKILL")
    assert table.now == pytest.approx(1.0 + KILL_BOUND_S)
    assert path.exists()


def test_fake_malformed_fields_are_ignored_and_nothing_is_signalled(instance_dir: Path) -> None:
    table = FakeTable()
    fake_record(instance_dir, pid="500")
    [report] = reap_orphans(instance_dir.parent, table=table)
    assert (report.outcome, report.detail) == (
        OrphanOutcome.IGNORED,
        "unreadable record: pid must be an integer",
    )
    assert table.signals == []
