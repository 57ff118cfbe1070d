"""Nothing a server started outlives its stop, however it left the server's process group
(``_edges/descendants.py``): a server that daemonizes a grandchild the classic way (fork,
``setsid``, fork; the grandchild ignores SIGTERM and SIGHUP: ``tests/helpers/
daemon_wrapper.sh``) is stopped with the grandchild SIGKILLed after the grace, and the
evidence and the log say so; so is one whose leader exits on its own. Each in both host
situations: without a delegated cgroup (this host's default: the leader is a child
subreaper, so the grandchild stays in its tree) and with a cgroup the test makes (the
cgroup variant is skipped, saying why, where this process may make none)."""

from __future__ import annotations

import functools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import trio

from cgroup_support import in_cgroup, made_cgroup
from edges.process_support import HELPERS, PYTHON, Launch, linux_only, wait_for_file
from inferactors._edges import descendants
from inferactors._edges.cgroups import CgroupTree
from inferactors._edges.process import ManagedProcess, open_child_process
from proc_checks import is_gone

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]

DAEMON_WRAPPER = HELPERS / "daemon_wrapper.sh"

Trees = Callable[[], CgroupTree | None]


@pytest.fixture(params=["no cgroup", "cgroup"])
def host(request: pytest.FixtureRequest) -> Iterator[CgroupTree | None]:
    """The host situation: no delegated cgroup (None), or a cgroup tree the test made."""
    if request.param == "no cgroup":
        yield None
        return
    with made_cgroup() as base:
        yield CgroupTree.at(base)


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """Pids of the daemons a test saw; each one still alive after it is SIGKILLed (through
    a pidfd, never a reused pid), so a failing test leaves nothing behind."""
    seen: list[int] = []
    fds = []
    yield seen
    for pid in seen:
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:
            continue
    for fd in fds:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


async def spawn(nursery: trio.Nursery, launch: Launch, tree: CgroupTree | None) -> ManagedProcess:
    opener = functools.partial(open_child_process, cgroups=lambda: tree)
    return await ManagedProcess.spawn(nursery, launch, open_process=opener)


def daemonizing(cwd: Path, *server: str) -> Launch:
    args = (str(DAEMON_WRAPPER), str(cwd / "daemon.pid"), *server)
    return Launch(Path("/bin/sh"), args, cwd)


async def the_daemon(cwd: Path, seen: list[int]) -> int:
    pid = int(await wait_for_file(cwd / "daemon.pid"))
    seen.append(pid)
    return pid


async def test_a_stop_kills_a_daemonized_grandchild_that_ignores_sigterm(
    host: CgroupTree | None,
    daemons: list[int],
    tmp_path: Path,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cwd = tmp_path / "chat-0123abcd-node"
    cwd.mkdir()
    process = await spawn(nursery, daemonizing(cwd, "/bin/sleep", "600"), host)
    daemon = await the_daemon(cwd, daemons)
    assert os.getsid(daemon) not in (daemon, process.pid)  # a session whose leader is gone
    assert os.getpgid(daemon) != process.pgid
    if host is None:
        assert psutil.Process(daemon).ppid() == process.pid  # adopted by the subreaper leader
    else:
        cgroup = process.cgroup
        assert cgroup is not None
        assert cgroup.is_relative_to(host.root)
        assert in_cgroup(process.pid, cgroup)
        assert in_cgroup(daemon, cgroup)
    caplog.set_level(logging.WARNING, logger=descendants.__name__)
    evidence = await process.terminate(0.5)
    assert is_gone(daemon), "the daemonized grandchild outlived the stop"
    assert evidence.killed == (daemon,)
    assert daemon in evidence.escaped
    assert evidence.survivors == ()
    said = f"process {daemon} (outside its group) survived; killed"
    assert said in evidence.describe()
    assert [r.getMessage() for r in caplog.records] == [f"server process {process.pid}: {said}"]
    if process.cgroup is not None:
        assert not process.cgroup.exists(), "the server's cgroup was left after the stop"
        assert not process.cgroup.parent.exists(), "its life's emptied directory was left"


async def test_a_leader_that_exits_on_its_own_takes_its_daemon_along(
    host: CgroupTree | None, daemons: list[int], tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The server daemonizes, runs a few seconds (looked at meanwhile), and exits: nothing
    it started outlives it."""
    process = await spawn(nursery, daemonizing(tmp_path, "/bin/sleep", "2.5"), host)
    daemon = await the_daemon(tmp_path, daemons)
    evidence = await process.wait_exited()
    assert evidence.exit_code == 0
    assert is_gone(daemon), "the daemon outlived the server"
    assert evidence.killed == (daemon,)


ORPHANING = """
import os, signal, sys, time
child = os.fork()
if child == 0:
    os.setpgid(0, 0)  # a group of its own in the server's session, as job control does
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open("job.tmp", "w").write(str(os.getpid())); os.rename("job.tmp", "job.pid")
    time.sleep(600)
    sys.exit(0)
while not os.path.exists("job.pid"):
    time.sleep(0.01)
"""
"""A leader that leaves a job in a process group of its own and exits at once."""


async def test_an_orphan_adopted_by_us_is_found_by_its_session(
    daemons: list[int], tmp_path: Path, nursery: trio.Nursery
) -> None:
    """No cgroup, and the leader exits before any look at its tree: its orphan went to us
    (the test process is a child subreaper, as ``inferactors run`` is) and is the server's
    by its session."""
    process = await spawn(nursery, Launch(Path(PYTHON), ("-c", ORPHANING), tmp_path), None)
    evidence = await process.wait_exited()
    job = int((tmp_path / "job.pid").read_text())
    daemons.append(job)
    assert os.getsid(job) == process.pid
    assert is_gone(job), "the orphaned job outlived its server"
    assert evidence.killed == (job,)
