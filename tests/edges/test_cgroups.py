"""One cgroup per server (`_edges/cgroups.py`) on this host's cgroup v2, in a cgroup the test
makes (skipped, saying why, where the host lets this process make none): a server that
daemonizes a grandchild (a new session, its parent gone) is ended with its cgroup; a later
life of the supervisor finds the cgroups an earlier life left, and only those (never a
running life's, never another data root's); a record can name only a cgroup of our layout;
our own cgroup counts as delegated only when it is not the hierarchy's root.

The servers are ``sh`` wrappers placed into their cgroup between fork and exec, as the
exec helper does it (`enter_self` on a descriptor opened in the parent)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cgroup_support import enter_self, kill, made_cgroup, start_in_cgroup
from inferactors._edges.cgroups import (
    CgroupTree,
    ServerCgroup,
    data_root_key,
    life_name,
    life_running,
    own_cgroup,
    recorded_cgroup,
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
    with made_cgroup() as path:
        yield path


def daemonizing_server(cgroup: ServerCgroup, pidfile: Path) -> subprocess.Popen[bytes]:
    """``sh`` that starts ``sleep`` in a session of its own and exits at once: the
    double-forking daemon no process group reaches. Its pid file is written once it has
    its session."""
    fd = cgroup.procs_fd()
    try:
        script = (
            f"setsid sh -c 'echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} "
            "&& exec sleep 600' &"
        )
        return subprocess.Popen(["sh", "-c", script], preexec_fn=lambda: enter_self(fd))
    finally:
        os.close(fd)


def daemon_in(cgroup: ServerCgroup, tmp_path: Path, name: str = "grandchild") -> int:
    pidfile = tmp_path / f"{name}.pid"
    daemonizing_server(cgroup, pidfile).wait(10)  # the wrapper is gone
    wait_for(pidfile.exists)
    return int(pidfile.read_text())


def test_a_daemonized_grandchild_is_ended_with_its_servers_cgroup(
    base: Path, tmp_path: Path
) -> None:
    tree = CgroupTree.at(base)
    cgroup = tree.place(tmp_path / "state" / "chat-1234abcd-local")
    assert cgroup.name.startswith("chat-1234abcd-local-")
    grandchild = daemon_in(cgroup, tmp_path)
    assert os.getsid(grandchild) == grandchild  # its own session: no group of ours holds it
    assert cgroup.members() == [grandchild]
    assert cgroup.holds(grandchild)
    assert kill(cgroup)
    wait_for(lambda: gone(grandchild))
    assert cgroup.members() == []
    assert cgroup.remove()


def test_signal_reaches_each_member_once_through_a_pidfd(base: Path, tmp_path: Path) -> None:
    cgroup = CgroupTree.at(base).place(tmp_path / "chat")
    grandchild = daemon_in(cgroup, tmp_path)
    assert cgroup.signal(0) == [grandchild]  # signal 0: reached, nothing sent
    assert cgroup.signal(9) == [grandchild]
    wait_for(lambda: gone(grandchild))
    assert cgroup.signal(9) == []


def test_a_later_life_finds_only_what_lives_now_over_left(base: Path, tmp_path: Path) -> None:
    data_root = tmp_path / "state"
    tree = CgroupTree.at(base)
    ended_life = tree.root / data_root_key(data_root) / "1-5"  # pid 1 never started at 5
    left = ServerCgroup(ended_life / "chat-1-aaaa")
    left.path.mkdir(parents=True)
    ServerCgroup(ended_life / "empty-2-bbbb").path.mkdir()  # an empty one is not left behind
    ours = tree.place(data_root / "mine")  # this life's: running, never touched
    other_root = tree.place(tmp_path / "other-root" / "theirs")  # another data root's
    grandchild = daemon_in(left, tmp_path)
    mine = daemon_in(ours, tmp_path, "mine")
    theirs = daemon_in(ServerCgroup(other_root.path), tmp_path, "theirs")
    assert life_running(ours.path.parent.name)
    assert not life_running("1-5")
    found = tree.left_behind(data_root)
    assert found == [left]
    assert not (ended_life / "empty-2-bbbb").exists()  # tidied on the way
    assert kill(found[0])
    wait_for(lambda: gone(grandchild))
    assert tree.left_behind(data_root) == []
    assert not ended_life.exists()
    assert not gone(mine)
    assert not gone(theirs)
    for cgroup in (ours, other_root):
        assert kill(cgroup)


def test_a_record_can_name_only_a_cgroup_of_our_layout(base: Path, tmp_path: Path) -> None:
    data_root = tmp_path / "state"
    placed = CgroupTree.at(base).place(data_root / "chat")
    assert recorded_cgroup(str(placed.path), data_root) == placed
    assert recorded_cgroup(str(placed.path), tmp_path / "elsewhere") is None  # not this root's
    assert recorded_cgroup(str(base), data_root) is None  # not a server cgroup
    assert recorded_cgroup("/", data_root) is None
    assert recorded_cgroup(f"{placed.path}/../../..", data_root) is None
    assert recorded_cgroup("relative/inferactors/x/y/z", data_root) is None
    assert placed.remove()


def test_a_life_is_named_by_pid_and_start() -> None:
    name = life_name()
    assert name.startswith(f"{os.getpid()}-")
    assert life_running(name)
    assert not life_running(f"{os.getpid()}-1")  # our pid, another start: an earlier life
    assert life_running("not-a-life")  # unreadable: never taken for an ended life


def test_our_cgroup_is_delegated_only_below_the_hierarchys_root(base: Path) -> None:
    """Here, at the root of the unified hierarchy, nothing is delegated to us; a process
    in a cgroup of its own that it may write finds its tree under it."""
    if own_cgroup() == "/":
        assert CgroupTree.delegated() is None
    code = (
        "from inferactors._edges.cgroups import server_tree, own_cgroup\n"
        "tree = server_tree()\n"
        "print(own_cgroup(), tree.root if tree else None)\n"
    )
    process = start_in_cgroup(base, [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=30)
    own, root = out.split()
    assert own == f"/{base.name}"
    assert root == str(base / "inferactors")


def test_a_removed_cgroup_takes_its_emptied_life_and_data_root_directories(
    base: Path, tmp_path: Path
) -> None:
    """After a stop nothing empty is left: the last cgroup of a life takes the life's and
    the data root's directories with it; the tree's own directory and anything above stay,
    and a directory still holding a sibling stays."""
    tree = CgroupTree.at(base)
    first = tree.place(tmp_path / "state" / "chat")
    second = tree.place(tmp_path / "state" / "embed")
    life, key = first.path.parent, first.path.parent.parent
    first.discard()
    assert not first.path.exists()
    assert life.exists()  # its sibling is still in it
    second.discard()
    assert not life.exists()
    assert not key.exists()
    assert tree.root.exists()
    third = tree.place(tmp_path / "state" / "chat")  # a later spawn makes them again
    assert third.path.parent == life
    third.discard()
    assert not key.exists()


def test_without_a_delegated_cgroup_a_warning_says_why_and_what_tracks_instead(
    base: Path,
) -> None:
    """A process at the root of the hierarchy, where nothing is delegated to it: once, a
    warning names the reason and the fallback."""
    code = (
        "import logging\n"
        "logging.basicConfig(format='%(levelname)s %(message)s', level=logging.DEBUG)\n"
        "from inferactors._edges.cgroups import server_tree\n"
        "print(server_tree(), server_tree())\n"
    )
    process = start_in_cgroup(
        base.parent,  # the hierarchy's root
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=30)
    assert out.split() == ["None", "None"]
    assert err.splitlines() == [
        "DEBUG no cgroup per server: this process is in the root cgroup v2, which is not "
        "delegated to it; what a server starts is tracked by its process group, its tree "
        "(the server a child subreaper) and its session, and killed with it"
    ]
