"""Daemons a server leaves at the last moment (``tests/helpers/late_daemon.py``: fork,
``setsid``, fork, in a new session and process group, ignoring SIGTERM and SIGHUP) end
with it (``_edges/descendants.py``, ``_edges/process.py``):

- a server that crashes right after it daemonized a grandchild holding its listening
  port: the port is free once the exit is settled (a next life of the instance must not
  find it "held by a stranger" that is our own orphan), and a later supervisor frees it too
  when the first was SIGKILLed;
- a server that starts its daemon only once SIGTERM arrives, after every look before it.

Each in the host situations: a cgroup the test makes (skipped, saying why, where this
process may make none); no cgroup, as ``inferactors run`` (a child subreaper that claims
the orphans outside its session); and, for the daemon started on SIGTERM, no cgroup in a
library's host (no subreaper: the stop's grace looks while the leader lingers)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from cgroup_support import enter_self, made_cgroup
from edges.orphans_support import edit_record
from edges.process_support import (
    HELPERS,
    PYTHON,
    Launch,
    _set_subreaper,
    linux_only,
    wait_for_file,
)
from inferactors._edges.cgroups import CgroupTree, ServerCgroup
from inferactors._edges.descendants import claim_orphans
from inferactors._edges.netcheck import port_in_use
from inferactors._edges.orphan_record import RECORD_NAME, refresh_record, write_record
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import reap_orphans
from inferactors._edges.process import ManagedProcess, open_child_process
from proc_checks import is_gone

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]

LATE_DAEMON = HELPERS / "late_daemon.py"


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """Pids of the daemons a test saw; any still alive afterwards is SIGKILLed through a
    pidfd (never a reused pid), so a failing test leaves nothing behind."""
    seen: list[int] = []
    yield seen
    for pid in seen:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


@pytest.fixture(params=["cgroup", "run", "library"])
def host(request: pytest.FixtureRequest) -> Iterator[tuple[str, CgroupTree | None]]:
    """The host situation: a cgroup tree the test made; no cgroup in a child subreaper
    that claims the orphans outside its session (``inferactors run``); no cgroup and no
    subreaper (a library's host)."""
    if request.param == "cgroup":
        with made_cgroup() as base:
            yield request.param, CgroupTree.at(base)
        return
    if request.param == "library":
        _set_subreaper(False)
        yield request.param, None
        return
    claim_orphans()
    try:
        yield request.param, None
    finally:
        claim_orphans(False)


async def spawn(
    nursery: trio.Nursery, cwd: Path, tree: CgroupTree | None, *args: str
) -> ManagedProcess:
    launch = Launch(Path(PYTHON), (str(LATE_DAEMON), str(cwd), *args), cwd)
    opener = functools.partial(open_child_process, cgroups=lambda: tree)
    return await ManagedProcess.spawn(nursery, launch, open_process=opener)


async def test_a_daemon_holding_the_port_dies_with_its_crashed_server(
    host: tuple[str, CgroupTree | None],
    daemons: list[int],
    instance_dir: Path,
    nursery: trio.Nursery,
) -> None:
    situation, tree = host
    if situation == "library":
        pytest.skip(
            "a library's host without a cgroup cannot see a daemon whose leader exits "
            "at once (it goes to init in a session never seen): descendants.py says so"
        )
    process = await spawn(nursery, instance_dir, tree, "crash")
    port = int(await wait_for_file(instance_dir / "port"))
    daemons.append(int(await wait_for_file(instance_dir / "daemon.pid")))
    evidence = await process.wait_exited()
    assert evidence.exit_code == 1
    assert is_gone(daemons[0]), "the daemon holding the port outlived its server"
    assert evidence.killed == (daemons[0],)
    assert not await port_in_use("127.0.0.1", port), "the port is still held by our orphan"
    if process.cgroup is not None:
        assert not process.cgroup.exists()
        assert not process.cgroup.parent.exists(), "the life's emptied directory was left"


@pytest.mark.parametrize("linger_s", [0.0, 0.3])
async def test_a_daemon_started_on_sigterm_is_stopped_with_its_server(
    host: tuple[str, CgroupTree | None],
    linger_s: float,
    daemons: list[int],
    instance_dir: Path,
    nursery: trio.Nursery,
) -> None:
    """The daemon is started after the last look before the stop; the leader exits as
    soon as it has (``linger_s`` 0) or a little later."""
    situation, tree = host
    if situation == "library" and linger_s == 0.0:
        pytest.skip(
            "a library's host without a cgroup cannot see a daemon whose leader exits "
            "at once (it goes to init in a session never seen): descendants.py says so"
        )
    process = await spawn(nursery, instance_dir, tree, "on-term", str(linger_s))
    await wait_for_file(instance_dir / "ready")
    evidence = await process.terminate(5.0)
    daemons.append(int((instance_dir / "daemon.pid").read_text()))
    assert evidence.exit_code == 0
    assert is_gone(daemons[0]), "the daemon started on SIGTERM outlived the stop"
    assert daemons[0] in evidence.killed
    assert evidence.survivors == ()


@pytest.mark.parametrize("cgroup", [False, True], ids=["no cgroup", "cgroup"])
def test_a_later_life_frees_the_port_our_orphan_daemon_holds(
    cgroup: bool, daemons: list[int], instance_dir: Path
) -> None:
    """The supervisor was SIGKILLed (its record's life edited to an earlier one) and its
    server with it (the parent-death signal); the daemon the server left still listens on
    its port. The next life's reaping ends it before anything starts: the port is free,
    not "held by a stranger" that is our own orphan."""
    with contextlib.ExitStack() as stack:
        tree = CgroupTree.at(stack.enter_context(made_cgroup())) if cgroup else None
        place = tree.place(instance_dir) if tree is not None else None
        server = start_serving(instance_dir, place)
        stack.callback(server.wait)
        stack.callback(server.kill)
        port = int(wait_file(instance_dir / "port"))
        daemons.append(int(wait_file(instance_dir / "daemon.pid")))
        assert write_record(instance_dir, server.pid, port, ["late_daemon.py", "serve"])
        record = refresh_record(instance_dir, server.pid)  # as the runtime does every second
        assert record is not None
        # found by its record without a cgroup; with one, the cgroup holds it (no walk)
        assert (daemons[0] in dict(record.escaped)) is (place is None)
        assert record.cgroup == (None if place is None else str(place.path))
        edit_record(instance_dir / RECORD_NAME, supervisor_create_time=1.0)  # an earlier life
        server.kill()
        server.wait()
        assert is_listening(port), "the daemon should hold the port before the reaping"
        [report] = reap_orphans(instance_dir.parent, grace_s=0.3, cgroups=lambda: tree)
        assert report.outcome is OrphanOutcome.KILLED, report.detail
        assert is_gone(daemons[0])
        assert not is_listening(port), "the port is still held by our own orphan"
        if place is not None:
            assert not place.path.exists()


def start_serving(instance_dir: Path, cgroup: ServerCgroup | None) -> subprocess.Popen[bytes]:
    """The helper in ``serve`` mode, in its own session (as every server we start), in
    ``cgroup`` from its exec on when one is given."""
    argv = [PYTHON, str(LATE_DAEMON), str(instance_dir), "serve"]
    if cgroup is None:
        return subprocess.Popen(argv, start_new_session=True)
    fd = cgroup.procs_fd()
    try:
        return subprocess.Popen(argv, start_new_session=True, preexec_fn=lambda: enter_self(fd))
    finally:
        os.close(fd)


def wait_file(path: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return path.read_text()


def is_listening(port: int) -> bool:
    return trio.run(port_in_use, "127.0.0.1", port)
