"""A real ``inferactors run`` whose servers flood their output without end (the kit's fake
llama-server writing short lines as fast as its pipe takes them): both reach Running and
pass deep health, ``inferactors logs -n 100`` answers 100 lines, the flood marker among
the last 1000, and ``inferactors status`` answers. How fast (milliseconds, loop lag, RSS) is
``bench/bench_log_flood.py``'s to measure, not a test's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli.run_support import RunProcess
from inferactors.testing import FakeServerFaults, RuntimeKit
from inferactors.testing._fake_launch import write_fake_server_program
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "inferactors", *args]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


def test_logs_and_status_answer_while_every_server_floods(inferactors_kit: RuntimeKit) -> None:
    flooding = write_fake_server_program(
        inferactors_kit.root / "flooding-server",
        faults=FakeServerFaults(flood_bytes_per_s=50e6, flood_line_bytes=100),
        python=inferactors_kit.workspace.python,
        sys_path=inferactors_kit.workspace.sys_path,
    )
    run = RunFile.create(inferactors_kit)
    run.write(Entry("one", free_port()), Entry("two", free_port()), program=flooding)
    process = RunProcess.start(run.path)
    try:
        process.wait_for("deep health: one token")
        process.wait_for("deep health: one token")
        logs = cli("logs", "one", "-n", "100", str(run.path), home=run.path.parent)
        assert logs.returncode == 0, logs.stderr
        assert len(logs.stdout.splitlines()) == 100
        # The marker follows each batch of kept lines; with the output also on disk (the
        # default) a batch can be over 100 lines (2,000 lines a second, read less often).
        more = cli("logs", "one", "-n", "1000", str(run.path), home=run.path.parent)
        lines = more.stdout.splitlines()
        assert any("of output dropped here: the server wrote more than" in li for li in lines)
        status = cli("status", str(run.path), home=run.path.parent)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("running") == 2, status.stdout
    finally:
        process.process.terminate()
        assert process.finish() == 0, process.output()
