"""`tree_usage` on a real process tree: the resident memory and CPU time of a process and
its descendants, found from the kernel's children lists (not a walk of every process on
the host); None for a process that is gone."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from edges.process_support import linux_only
from inferactors._edges.tree_usage import tree_usage

pytestmark = linux_only


def settle(pid: int) -> None:
    """Wait until ``pid`` runs `sleep` and its resident memory stopped changing (the
    loader maps pages lazily: on a loaded machine, for tens of ms after the exec)."""
    process, seen = psutil.Process(pid), [-1, -2, -3]
    deadline = time.monotonic() + 10
    while process.name() != "sleep" or len(set(seen[-3:])) > 1:
        assert time.monotonic() < deadline, "sleep never settled"
        time.sleep(0.02)
        seen.append(process.memory_info().rss)


def test_a_tree_is_its_members_memory_and_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 600 & echo $! > child; wait"], cwd=tmp_path)
    try:
        while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text():
            time.sleep(0.01)
        child = int((tmp_path / "child").read_text())
        settle(child)  # forked, exec'ing: its memory would change between the reads below

        def no_host_walk(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
            raise AssertionError("children() reads every process on the host")

        monkeypatch.setattr(psutil.Process, "children", no_host_walk)
        used = tree_usage(leader.pid)
        alone = [psutil.Process(pid) for pid in (leader.pid, child)]
        assert used is not None
        assert used.rss_bytes == pytest.approx(sum(p.memory_info().rss for p in alone), rel=0.2)
        assert used.rss_bytes > alone[0].memory_info().rss  # the child counts too
        assert used.cpu_s == pytest.approx(
            sum(p.cpu_times().user + p.cpu_times().system for p in alone), abs=0.05
        )
    finally:
        leader.kill()
        subprocess.run(["kill", "-9", str(child)], check=False)
        leader.wait(5)
    assert tree_usage(leader.pid) is None  # reaped: gone
