"""A real ``inferactors run`` whose server daemonizes a grandchild (fork, ``setsid``, fork;
the daemon ignores SIGTERM and SIGHUP): ``inferactors stop`` ends the daemon and the
supervisor's log says so ("process N (outside its group) survived; killed"); after the
supervisor is SIGKILLed the daemon outlives it, and the next ``inferactors run`` on the
same run file finds it through the server's record and kills it, saying what it found.
Once without a delegated cgroup (this host's default: the record lists the daemon by pid
and start) and once with the supervisor started inside a cgroup the test makes, so that
each server gets a cgroup of its own under it and the record names it (skipped, saying
why, where this process may make none)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cgroup_support import in_cgroup, made_cgroup, start_in_cgroup
from cli.run_support import RunProcess
from daemon_support import HOSTS, Daemons, daemonizing_program, daemons_killed_after, instance_dir
from inferactors._edges.orphan_record import find_orphans
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from proc_checks import is_gone
from service.fleet_support import Entry, RunFile
from support import own_state_dir_env


@pytest.fixture(params=HOSTS)
def supervisor_cgroup(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    """Where ``inferactors run`` runs: None (this host's default), or a cgroup of its own."""
    if request.param == "no cgroup":
        yield None
        return
    with made_cgroup() as base:
        yield base


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    with daemons_killed_after() as seen:
        yield seen


def start_run(path: Path, cgroup: Path | None) -> RunProcess:
    argv = [sys.executable, "-m", "inferactors", "run", str(path)]
    options: dict[str, object] = {
        "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True,
        "env": own_state_dir_env(path.parent),
    }  # fmt: skip
    if cgroup is None:
        return RunProcess.reading(subprocess.Popen(argv, **options))  # type: ignore[call-overload]
    return RunProcess.reading(start_in_cgroup(cgroup, argv, **options))


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "inferactors", *args]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


def wait_recorded(data_root: Path, daemon: int, cgroup: Path | None, timeout_s: float = 30) -> None:
    """Wait until the server's record covers the daemon: by its cgroup, or by pid (the
    runtime refreshes the record once a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in find_orphans(data_root):
            if cgroup is not None and record.cgroup is not None:
                assert Path(record.cgroup).is_relative_to(cgroup)
                assert in_cgroup(daemon, Path(record.cgroup))
                return
            if cgroup is None and daemon in dict(record.escaped):
                return
        time.sleep(0.05)
    raise AssertionError(f"no record under {data_root} covered daemon {daemon}")


def test_stop_and_a_supervisor_sigkill_leave_no_daemon(
    supervisor_cgroup: Path | None, daemons: Daemons, inferactors_kit: RuntimeKit
) -> None:
    run = RunFile.create(inferactors_kit)
    program = daemonizing_program(inferactors_kit.root / "daemonizing", run.program)
    run.write(Entry("chat", free_port()), program=program)
    data_root = inferactors_kit.root / "state"
    first = start_run(run.path, supervisor_cgroup)
    try:
        first.wait_for("deep health: one token")
        where = instance_dir(data_root, "chat")
        daemon = daemons.wait_new(where)
        stopped = cli("stop", "chat", str(run.path), home=run.path.parent)
        assert stopped.returncode == 0, stopped.stderr
        first.wait_for(f"process {daemon} (outside its group) survived; killed")
        assert is_gone(daemon), "the daemon outlived inferactors stop"

        started = cli("start", "chat", str(run.path), home=run.path.parent)
        assert started.returncode == 0, started.stderr
        daemon = daemons.wait_new(where)
        wait_recorded(data_root, daemon, supervisor_cgroup)
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.finish()
    time.sleep(0.5)
    assert not is_gone(daemon), "the daemon did not outlive its supervisor: nothing to find"

    second = start_run(run.path, supervisor_cgroup)
    try:
        line = second.wait_for(f"process {daemon} (outside its group) survived; killed")
        assert "found a server left by an earlier life" in line
        assert "orphaned" in line
        assert is_gone(daemon), "the next life did not end the daemon"
        second.wait_for("deep health: one token")
        daemon = daemons.wait_new(where)
    finally:
        second.process.terminate()
        assert second.finish() == 0, second.output()
    assert f"process {daemon} (outside its group) survived; killed" in second.output()
    assert is_gone(daemon), "the daemon outlived the supervisor's shutdown"
    if supervisor_cgroup is not None:
        held = [p for p in supervisor_cgroup.rglob("cgroup.procs") if p.read_text().strip()]
        assert held == [], "a server's cgroup still holds a process"
