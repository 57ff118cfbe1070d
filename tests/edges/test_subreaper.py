"""The supervisor as subreaper (`_edges/subreaper.py`), in a process of its own (the test
runner must not become one): a server's wrapper that daemonizes a grandchild and exits
leaves the grandchild to us, not to init; when it exits, `Reaper.sweep` collects it (one
sweep later than it became a zombie), and never a child someone else waits for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HELPER = """
import json, os, subprocess, time
from inferactors._edges.subreaper import Reaper, become_subreaper

became = become_subreaper()
wrapper = subprocess.Popen(["sh", "-c", "sleep 0.5 & echo $!"], stdout=subprocess.PIPE)
grandchild = int(wrapper.stdout.readline())
wrapper.wait()
parent = int(open(f"/proc/{grandchild}/stat").read().rsplit(")", 1)[1].split()[1])
known = subprocess.Popen(["sleep", "0.2"])  # ours, and waited for below: never reaped
reaper = Reaper()
first_sweeps = []
deadline = time.monotonic() + 10
while not reaper.reaped and time.monotonic() < deadline:
    first_sweeps.append(reaper.sweep(known=[known.pid]))
    time.sleep(0.1)
known_status = known.wait()
print(json.dumps({
    "became": became, "parent": parent, "me": os.getpid(), "grandchild": grandchild,
    "reaped": [pid for pid, _ in reaper.reaped], "known_status": known_status,
    "first_sweep": first_sweeps[0],
}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_an_orphaned_grandchild_is_ours_and_is_reaped_once_it_exits() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HELPER], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["became"] is True
    assert seen["parent"] == seen["me"]  # re-parented to the subreaper, not to init
    assert seen["reaped"] == [seen["grandchild"]]
    assert seen["first_sweep"] == []  # not yet a zombie, or a zombie only once
    assert seen["known_status"] == 0  # a known child's status was left to its waiter
