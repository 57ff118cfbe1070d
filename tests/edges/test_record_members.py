"""The record's group members are read from the server's tree while its leader lives, not
from every process on the host (`orphan_record.refresh_record`, every second per server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edges.process_support import linux_only
from inferactors._edges import proctable
from inferactors._edges.orphan_record import refresh_record, write_record

pytestmark = [linux_only]

# A session leader with two children in its group, the first with a child of its own.
LEADER = """
import os, sys, time
def live():
    open(os.path.join(sys.argv[1], f"up-{os.getpid()}"), "w").close()
    time.sleep(60)
    os._exit(0)
for _ in range(2):
    if os.fork() == 0:
        if os.fork() == 0:
            live()
        live()
live()
"""


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    ready = tmp_path / "up"
    ready.mkdir()
    process = subprocess.Popen([sys.executable, "-c", LEADER, str(ready)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30.0
        while len(list(ready.iterdir())) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        yield process
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_members_come_from_the_leaders_tree_not_a_walk_of_the_host(
    leader: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert write_record(tmp_path, leader.pid, 1, ["leader"]) is not None

    def walk_of_every_process(self: object, pgid: int) -> tuple[int, ...]:
        raise AssertionError(f"walked every process on the host for group {pgid}")

    monkeypatch.setattr(proctable.SystemProcessTable, "live_members", walk_of_every_process)
    record = refresh_record(tmp_path, leader.pid)
    assert record is not None
    members = {pid for pid, _ in record.members}
    assert leader.pid in members
    assert len(members) == 5  # the leader, its two children and their two children
    assert members <= set(proctable.tree_pids(leader.pid))
