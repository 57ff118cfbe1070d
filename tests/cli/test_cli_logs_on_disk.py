"""A managed server's output is kept on disk by default, under the state directory, private,
and ``inferactors logs`` still shows it after the supervisor was restarted (it was kept in
memory only unless an undocumented key was set, so a restart lost it). A real ``inferactors
run`` of a real fake server, stopped and run again."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferactors.testing import write_fake_server_program
from support import Unprivileged, run_as_line

RUN_FILE = """
node_id = "ci"

[managed]
registry = "{registry}"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "{server}" }}
{run_as}
[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port} }}
"""


def _until_running(run_file: Path) -> subprocess.Popen[str]:
    run = subprocess.Popen(
        [sys.executable, "-m", "inferactors", "run", str(run_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.stdout is not None
    said: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any("-> running" in line for line in said):
        line = run.stdout.readline()
        if not line:
            break  # it exited
        said.append(line)
    if not any("-> running" in line for line in said):
        run.kill()
        rest, _ = run.communicate(timeout=30)  # closes the pipe: none is left for the GC
        pytest.fail("never running:\n" + "".join(said) + rest)
    return run


def _stop(run: subprocess.Popen[str]) -> None:
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=30)
    assert run.returncode == 0


def _announced_pids(run_file: Path) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "logs", "chat", str(run_file), "-n", "100"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [
        int(pid) for pid in re.findall(r"fake server .* listening on \S+ pid (\d+)", done.stdout)
    ]


def test_output_lands_on_disk_and_logs_shows_it_after_a_supervisor_restart(
    server_dir: Path, registry_path: Path, free_port: int, unprivileged: Unprivileged
) -> None:
    program = write_fake_server_program(
        server_dir / "fake", python=unprivileged.python, sys_path=unprivileged.sys_path
    )
    run_file = server_dir / "run.toml"
    run_file.write_text(
        RUN_FILE.format(
            registry=registry_path,
            server=program,
            run_as=run_as_line(unprivileged.run_as),
            port=free_port,
        )
    )
    first = _until_running(run_file)
    try:
        (before,) = _announced_pids(run_file)
    finally:
        _stop(first)
    (log,) = (server_dir / "state" / "logs").iterdir()
    assert log.name.endswith(".log")
    assert log.stat().st_mode & 0o777 == 0o600
    assert log.parent.stat().st_mode & 0o777 == 0o700
    assert f"listening on http://127.0.0.1:{free_port} pid {before}" in log.read_text()
    second = _until_running(run_file)
    try:
        shown = _announced_pids(run_file)
    finally:
        _stop(second)
    assert len(shown) == 2, shown
    assert shown[0] == before  # the first supervisor's server, read back from the disk
    assert shown[1] != before
