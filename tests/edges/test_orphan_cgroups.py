"""A later life of the supervisor ends what an earlier life's server cgroups still hold
(``_edges/orphans.py`` with ``_edges/cgroups.py``), in a cgroup the test makes (skipped,
saying why, where this process may make none): the cgroup a record names, once its
supervisor is gone, even when the server itself is gone and only a daemon it left in
another session remains; a cgroup of a life now over that no record names; and never a
cgroup outside our layout that a record names, nor one of a life still running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cgroup_support import enter_self, kill, made_cgroup
from edges.orphans_support import PORT, edit_record
from edges.process_support import linux_only
from inferactors._edges.cgroups import CgroupTree, ServerCgroup, data_root_key
from inferactors._edges.orphan_record import RECORD_NAME, write_record
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import reap_orphans
from proc_checks import is_gone

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]

DAEMON = (
    "trap '' TERM HUP; setsid sh -c 'echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} "
    "&& exec sleep 600' & exec sleep 600"
)
"""A server (``sleep``, ending with the test) that first leaves a daemon in a session of
its own; both ignore SIGTERM and SIGHUP."""


@pytest.fixture
def tree() -> Iterator[CgroupTree]:
    with made_cgroup() as base:
        yield CgroupTree.at(base)


def start_in(cgroup: ServerCgroup, pidfile: Path) -> subprocess.Popen[bytes]:
    fd = cgroup.procs_fd()
    try:
        script = DAEMON.format(pidfile=pidfile)
        return subprocess.Popen(  # its own group, as every server we start
            ["/bin/sh", "-c", script], preexec_fn=lambda: enter_self(fd), start_new_session=True
        )
    finally:
        os.close(fd)


def wait_pid(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return int(path.read_text())


def end(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGKILL)
    server.wait()


def test_the_cgroup_a_record_names_is_emptied_once_its_supervisor_is_gone(
    tree: CgroupTree, instance_dir: Path
) -> None:
    cgroup = tree.place(instance_dir)
    server = start_in(cgroup, instance_dir / "daemon.pid")
    daemon = wait_pid(instance_dir / "daemon.pid")
    record = write_record(instance_dir, server.pid, PORT, ["sh", "-c", "..."])
    assert record is not None
    assert record.cgroup == str(cgroup.path)
    edit_record(instance_dir / RECORD_NAME, supervisor_create_time=1.0)  # an earlier life
    end(server)  # the server died with its supervisor; its daemon did not
    [report] = reap_orphans(instance_dir.parent, grace_s=0.3, cgroups=lambda: None)
    assert report.outcome is OrphanOutcome.KILLED
    assert report.detail.endswith(f"; process {daemon} (outside its group) survived; killed")
    assert is_gone(daemon)
    assert not cgroup.path.exists()
    assert not (instance_dir / RECORD_NAME).exists()


def test_a_cgroup_of_an_ended_life_without_a_record_is_emptied(
    tree: CgroupTree, tmp_path: Path
) -> None:
    data_root = tmp_path / "state"
    cgroup = ServerCgroup(tree.root / data_root_key(data_root) / "1-5" / "chat-1-0a0b0c0d")
    cgroup.path.mkdir(parents=True)
    server = start_in(cgroup, tmp_path / "daemon.pid")
    daemon = wait_pid(tmp_path / "daemon.pid")
    try:
        [report] = reap_orphans(data_root, grace_s=0.3, cgroups=lambda: tree)
    finally:
        server.wait()  # killed with its cgroup
    assert report.record_path == cgroup.path
    assert report.outcome is OrphanOutcome.KILLED
    assert report.detail == (
        f"the cgroup chat-1-0a0b0c0d of an earlier life, with no record, held "
        f"{', '.join(map(str, sorted((server.pid, daemon))))}; ended by SIGKILL after 0.3 s; "
        f"processes {', '.join(map(str, sorted((server.pid, daemon))))} (in that cgroup) "
        "survived; killed"
    )
    assert is_gone(daemon)
    assert not cgroup.path.parent.exists()  # the ended life's directory is gone too


def test_nothing_outside_our_layout_nor_of_a_running_life_is_touched(
    tree: CgroupTree, instance_dir: Path
) -> None:
    """A record naming a cgroup that is not ours (here the test's own base cgroup) is not a
    way to reach it; this life's cgroups are left alone."""
    foreign = ServerCgroup(tree.root.parent)
    server = start_in(foreign, instance_dir / "daemon.pid")
    daemon = wait_pid(instance_dir / "daemon.pid")
    mine = tree.place(instance_dir.parent / "mine")  # this (running) life's
    running = start_in(mine, instance_dir.parent / "mine.pid")
    try:
        record = write_record(instance_dir, server.pid, PORT, ["sh"])
        assert record is not None
        assert record.cgroup is None  # not a cgroup our layout makes: not recorded
        edit_record(
            instance_dir / RECORD_NAME, supervisor_create_time=1.0, cgroup=str(foreign.path)
        )
        server.send_signal(signal.SIGKILL)
        server.wait()
        [report] = reap_orphans(instance_dir.parent, grace_s=0.3, cgroups=lambda: tree)
        assert report.outcome is OrphanOutcome.STALE
        assert not is_gone(daemon)
        assert not is_gone(running.pid)
    finally:
        kill(foreign)
        kill(mine)
        running.wait()
