"""Tests of the orphan reaper's kill steps at exact times, on a fake process table with a
fake clock: SIGTERM obeyed, SIGKILL exactly after the grace, an unkillable group reported
alive and kept, and a malformed record never signalled.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import attrs
import pytest

from edges.orphans_support import PORT
from inferactors._edges.orphan_record import RECORD_NAME
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import KILL_BOUND_S, reap_orphans
from inferactors._edges.proctable import ProcessStart

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


@attrs.define
class FakeTable:
    """One recorded server (pid 500) and its dead supervisor; signals logged with times."""

    ignores: frozenset[int] = frozenset()
    now: float = 0.0
    alive: bool = True
    stopped: bool = False  # by SIGSTOP: a SIGTERM waits until a SIGCONT lets it run
    signals: list[tuple[float, int]] = attrs.field(factory=list)
    pending: bool = False

    def boot_id(self) -> str:
        return "boot-1"

    def identify(self, pid: int) -> ProcessStart | None:
        return ProcessStart(500, 500, 1000.0, 900.0) if pid == 500 and self.alive else None

    def live_members(self, pgid: int) -> tuple[int, ...]:
        return (500,) if self.alive and pgid == 500 else ()

    def signal_group(self, pgid: int, signum: int) -> None:
        self.signals.append((self.now, signum))
        if signum == signal.SIGCONT:
            self.stopped = False
        elif signum not in self.ignores:
            self.pending = True
        if self.pending and (not self.stopped or signum == signal.SIGKILL):
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
    assert table.signals == [(0.0, signal.SIGTERM), (0.0, signal.SIGCONT)]
    assert report.outcome is OrphanOutcome.KILLED


def test_fake_stopped_orphan_is_continued_and_ends_by_its_sigterm(instance_dir: Path) -> None:
    table = FakeTable(stopped=True)
    fake_record(instance_dir)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert table.signals == [(0.0, signal.SIGTERM), (0.0, signal.SIGCONT)]
    assert report.detail == "orphaned; group 500 ended by SIGTERM"


def test_fake_sigterm_ignored_is_killed_exactly_after_the_grace(instance_dir: Path) -> None:
    table = FakeTable(ignores=frozenset({signal.SIGTERM}))
    fake_record(instance_dir)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert table.signals == [
        (0.0, signal.SIGTERM),
        (0.0, signal.SIGCONT),
        (pytest.approx(3.0), signal.SIGKILL),
    ]
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
