"""`group_members.group_alive` on real process groups: it finds a live member where one
can be (the leader's tree, the leader's orphans that came to this subreaper, the cgroup)
without walking every process on the host, and walks them all only where nothing
narrower can see the orphans (no subreaper, the leader exited)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from edges.process_support import _set_subreaper, linux_only, no_leaked_descendants
from inferactors._edges.group_members import group_alive
from inferactors._edges.proctable import SystemProcessTable

pytestmark = linux_only

WRAPPER = "sleep 600 & echo $! > member; {end}"
"""A leader whose background child stays in its group; it waits, or exits at once."""


def _leader(tmp_path: Path, end: str) -> tuple[subprocess.Popen[bytes], int]:
    leader = subprocess.Popen(
        ["/bin/sh", "-c", WRAPPER.format(end=end)], cwd=tmp_path, start_new_session=True
    )
    for _ in range(500):
        text = (tmp_path / "member").read_text() if (tmp_path / "member").exists() else ""
        if text.endswith("\n"):
            return leader, int(text)
        time.sleep(0.01)
    raise AssertionError("the wrapper wrote no member pid")


def _exited_unreaped(leader: subprocess.Popen[bytes]) -> None:
    os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)


@pytest.fixture
def no_host_walk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the walks of every process on the host (each still done)."""
    walks: list[int] = []
    real = SystemProcessTable.live_members

    def counted(table: object, pgid: int) -> tuple[int, ...]:
        walks.append(pgid)
        return real(table, pgid)  # type: ignore[arg-type]

    monkeypatch.setattr(SystemProcessTable, "live_members", counted)
    return walks


def _kill(member: int) -> None:
    os.kill(member, signal.SIGKILL)
    try:
        psutil.Process(member).wait(5)  # ours (a subreaper) or init's: gone either way
    except psutil.NoSuchProcess:
        pass  # already reaped (by init, or by a subreaper before we looked): gone


def test_a_living_leaders_group_is_read_from_its_tree(
    tmp_path: Path, no_host_walk: list[int]
) -> None:
    with no_leaked_descendants():
        leader, member = _leader(tmp_path, "wait")
        assert group_alive(leader.pid, None)
        _kill(member)
        leader.wait(5)
    assert no_host_walk == []


def test_an_exited_leaders_orphans_are_read_from_this_subreapers_children(
    tmp_path: Path, no_host_walk: list[int]
) -> None:
    with no_leaked_descendants():  # the test process is a child subreaper meanwhile
        leader, member = _leader(tmp_path, "exit 0")
        _exited_unreaped(leader)
        assert psutil.Process(member).ppid() == os.getpid()  # its orphan came to us
        assert group_alive(leader.pid, None)  # the leader is a zombie; its member lives
        _kill(member)
        assert not group_alive(leader.pid, None)
        leader.wait(5)
    assert no_host_walk == []


def test_without_a_subreaper_an_exited_leaders_group_is_found_by_a_walk(
    tmp_path: Path, no_host_walk: list[int]
) -> None:
    _set_subreaper(False)
    leader, member = _leader(tmp_path, "exit 0")
    try:
        _exited_unreaped(leader)
        assert group_alive(leader.pid, None)
        assert no_host_walk == [leader.pid]  # its orphan went to init: out of narrower sight
    finally:
        os.kill(member, signal.SIGKILL)
        leader.wait(5)


def test_with_a_cgroup_only_its_members_are_read(tmp_path: Path, no_host_walk: list[int]) -> None:
    with no_leaked_descendants():
        leader, member = _leader(tmp_path, "wait")
        assert group_alive(leader.pid, lambda: [member])
        assert not group_alive(leader.pid, lambda: [os.getpid()])  # not of its group
        assert not group_alive(leader.pid, list)  # an empty cgroup: nothing left
        _kill(member)
        leader.wait(5)
    assert no_host_walk == []
