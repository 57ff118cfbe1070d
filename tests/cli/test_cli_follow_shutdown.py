"""``events -f`` and ``logs NAME -f`` against a real ``inferactors run`` that is stopped
(SIGTERM): each gets the last stop events, then its stream ends as a complete reply; the
command says the supervisor stopped and exits 0 (before, both were cut: "the supervisor
went away: incomplete chunked read", exit 1)."""

from __future__ import annotations

import signal
import subprocess
import sys

from cli.run_support import RunProcess
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile


def follow(run: RunFile, *command: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "inferactors", *command, str(run.path)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_follows_end_cleanly_with_the_last_exits_when_the_supervisor_stops(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("a", free_port()), Entry("b", free_port()))
    supervisor = RunProcess.start(run.path)
    try:
        supervisor.wait_for("supervising 2 of 2 instance(s)")
        events = follow(run, "events", "-f", "-n", "1")
        logs = follow(run, "logs", "a", "-f", "-n", "1")
        for process in (events, logs):
            assert process.stdout is not None
            assert process.stdout.readline()  # subscribed: the tail came
        status = subprocess.run(
            [sys.executable, "-m", "inferactors", "status", str(run.path)],
            capture_output=True,
            timeout=30,
            check=True,
        )
        assert status.stdout.count(b"running") == 2
        supervisor.process.send_signal(signal.SIGTERM)
        events_out, events_err = events.communicate(timeout=30)
        _, logs_err = logs.communicate(timeout=30)
    finally:
        code = supervisor.finish()  # killed if it did not stop
    assert code == 0, supervisor.output()
    assert (events.returncode, events_err) == (0, "inferactors events: the supervisor stopped\n")
    assert (logs.returncode, logs_err) == (0, "inferactors logs: the supervisor stopped\n")
    exits = [line for line in events_out.splitlines() if "exited with status" in line]
    assert len(exits) == 2, events_out
    assert all("reason: requested" in line for line in exits), events_out
