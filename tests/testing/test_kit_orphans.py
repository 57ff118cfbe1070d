"""Fakes die with the process that started them (issue 12 break, class 1): a script killed
by SIGKILL or SIGTERM, or one that exits without ``stop()``, and a pytest run killed by
SIGTERM (what CI timeouts send) leave no fake server, fake Ollama or forked child running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from proc_checks import is_gone

GONE_WITHIN_S = 2.0

LAUNCHER = """
import sys, time
from pathlib import Path
from inferactors.testing import ForkedChild, Timeline, start_fake_ollama, start_fake_server
where = Path(sys.argv[1])
llama = start_fake_server(where / "llama", timeline=Timeline.of(ForkedChild()))
mlx = start_fake_server(where / "mlx", flavor="mlx")
ollama = start_fake_ollama()
print(llama.pid, mlx.pid, ollama.pid, flush=True)
if sys.argv[2] == "wait":
    time.sleep(600)
"""

DOWNSTREAM_TEST = """
import time
from pathlib import Path

def test_long(fake_llama_server, fake_mlx_server, fake_ollama):
    pids = (fake_llama_server.pid, fake_mlx_server.pid, fake_ollama.pid)
    Path("pids.tmp").write_text(" ".join(map(str, pids)))
    Path("pids.tmp").rename("pids")
    time.sleep(600)
"""


@pytest.fixture
def left_behind() -> Iterator[list[int]]:
    """Pids to SIGKILL (each a group leader) after the test, should any have survived."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def all_gone(pids: list[int], within_s: float) -> list[int]:
    """Wait up to ``within_s`` for every pid to be gone; return those still running."""
    deadline = time.monotonic() + within_s
    while (alive := [pid for pid in pids if not is_gone(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def children(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children()]


@pytest.mark.parametrize("end", ["SIGKILL", "SIGTERM", "exit without stop()"])
def test_the_fakes_die_with_the_script_that_started_them(
    tmp_path: Path, left_behind: list[int], end: str
) -> None:
    mode = "exit" if end.startswith("exit") else "wait"
    argv = [sys.executable, "-c", LAUNCHER, str(tmp_path), mode]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as script:
        assert script.stdout is not None
        fakes = [int(pid) for pid in script.stdout.readline().split()]
        assert len(fakes) == 3, "the launcher did not start its fakes"
        left_behind.extend(fakes)
        forked = children(fakes[0])  # ForkedChild: it outlives the fake, not the launcher
        assert len(forked) == 1
        left_behind.extend(forked)
        if mode == "wait":
            assert all_gone([*fakes, *forked], 0.5) == [*fakes, *forked]  # alive meanwhile
            script.send_signal(signal.Signals[end])
        script.wait(timeout=30)
    started = time.monotonic()
    assert all_gone([*fakes, *forked], GONE_WITHIN_S) == []
    print(f"{end}: every fake gone {time.monotonic() - started:.2f} s after the launcher")


def test_a_pytest_run_killed_by_sigterm_leaves_no_fake(
    tmp_path: Path, left_behind: list[int]
) -> None:
    (tmp_path / "test_downstream.py").write_text(DOWNSTREAM_TEST)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_downstream.py"]
    with subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL) as run:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists():
            assert run.poll() is None, "the downstream pytest ended early"
            assert time.monotonic() < deadline, "the downstream test never started its fakes"
            time.sleep(0.05)
        fakes = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
        left_behind.extend(fakes)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
    assert run.returncode == -signal.SIGTERM  # killed: its fixtures' teardown never ran
    started = time.monotonic()
    assert all_gone(fakes, GONE_WITHIN_S) == []
    print(f"pytest: every fake gone {time.monotonic() - started:.2f} s after SIGTERM")
