"""One cgroup per server (issue 18 item 4; `_edges/cgroups.py`), on this host's cgroup v2:
a server that daemonizes a grandchild (a new session, its leader gone) is ended with its
cgroup; a later life of the supervisor finds the cgroup and its members by place; our own
cgroup counts as delegated only when it is not the hierarchy's root.

The servers are ``sh`` wrappers placed into their cgroup between fork and exec, as the
spawn is to do it (`enter_self` on a descriptor opened in the parent). Skipped where this
process may not make cgroups (no cgroup v2, not root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferactors._edges.cgroups import (
    CgroupTree,
    ServerCgroup,
    cgroup2_mount,
    enter_self,
    own_cgroup,
)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


@pytest.fixture
def base() -> Iterator[Path]:
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 here")
    path = mount / f"inferactors-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a cgroup here: {error}")
    try:
        yield path
    finally:
        for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if child.is_dir():
                ServerCgroup(child).kill()
                child.rmdir()
        path.rmdir()


def daemonizing_server(cgroup: ServerCgroup, pidfile: Path) -> subprocess.Popen[bytes]:
    """``sh`` that starts ``sleep`` in a session of its own and exits at once: the
    double-forking daemon no process group reaches."""
    fd = cgroup.procs_fd()
    try:
        script = f"setsid sleep 600 & echo $! > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}"
        return subprocess.Popen(["sh", "-c", script], preexec_fn=lambda: enter_self(fd))
    finally:
        os.close(fd)


def test_a_daemonized_grandchild_is_ended_with_its_servers_cgroup(
    base: Path, tmp_path: Path
) -> None:
    tree = CgroupTree.at(base)
    cgroup = tree.server("chat-1234abcd-local")
    pidfile = tmp_path / "grandchild.pid"
    leader = daemonizing_server(cgroup, pidfile)
    leader.wait(10)  # the wrapper is gone: no process group of ours holds the grandchild
    wait_for(pidfile.exists)
    grandchild = int(pidfile.read_text())
    assert os.getsid(grandchild) == grandchild  # its own session
    assert cgroup.members() == [grandchild]
    assert cgroup.kill()
    wait_for(lambda: gone(grandchild))
    assert cgroup.members() == []
    assert cgroup.remove()


def test_a_later_life_finds_the_cgroups_left_with_members(base: Path, tmp_path: Path) -> None:
    earlier = CgroupTree.at(base)
    left = earlier.server("chat-1")
    earlier.server("empty-2")  # an empty one is not left behind
    pidfile = tmp_path / "grandchild.pid"
    daemonizing_server(left, pidfile).wait(10)
    wait_for(pidfile.exists)
    grandchild = int(pidfile.read_text())
    later = CgroupTree.at(base)  # the supervisor started again
    found = later.left_behind()
    assert [(c.name, c.members()) for c in found] == [("chat-1", [grandchild])]
    assert found[0].kill()
    wait_for(lambda: gone(grandchild))
    assert later.left_behind() == []


def test_our_cgroup_is_delegated_only_below_the_hierarchys_root(base: Path) -> None:
    """Here, at the root of the unified hierarchy, nothing is delegated to us; a process
    in a cgroup of its own that it may write finds its tree under it."""
    if own_cgroup() == "/":
        assert CgroupTree.delegated() is None
    code = (
        "import sys, time\n"
        "from inferactors._edges.cgroups import CgroupTree, own_cgroup\n"
        "while own_cgroup() == '/': time.sleep(0.01)\n"
        "tree = CgroupTree.delegated()\n"
        "print(own_cgroup(), tree.root if tree else None)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    ServerCgroup(base).enter(process.pid)
    out, _ = process.communicate(timeout=30)
    own, root = out.split()
    assert own == f"/{base.name}"
    assert root == str(base / "inferactors")
