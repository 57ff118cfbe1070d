"""Shared arrange code for the tests of server records and the orphan reaper: the recorded
port, a synchronous poll, and records written by a supervisor that has already exited.

Imported as ``edges.orphans_support``; the ``instance_dir`` and ``sleeper`` fixtures live in
this folder's ``conftest.py``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from edges.process_support import PYTHON
from inferactors._edges.orphan_record import OrphanRecord, find_orphans
from proc_checks import is_gone

PORT = 18090


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def record_by_dead_supervisor(instance_dir: Path, pid: int) -> OrphanRecord:
    """Have a short-lived process record ``pid``, so the record's supervisor is dead."""
    code = (
        "import sys; from pathlib import Path; "
        "from inferactors._edges.orphan_record import write_record\n"
        "write_record(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), ['sleep', '600'])"
    )
    subprocess.run([PYTHON, "-c", code, str(instance_dir), str(pid), str(PORT)], check=True)
    [record] = find_orphans(instance_dir.parent)
    assert record.pid == pid
    assert is_gone(record.supervisor_pid)
    return record


def edit_record(path: Path, **changes: object) -> None:
    """Change fields in place (same file: owner and mode stay)."""
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
