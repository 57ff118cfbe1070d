"""Arrange code for the tests of a forking wrapper's orphaned group
(``test_fork_wrapper_stop``, ``test_setsid_escape``): a fake process table holding a group
whose leader is gone, a record of such a group, a wait for a real runtime to record the
wrapper's server, that runtime SIGKILLed, and the next runtime's reaping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import attrs
import trio

from edges.orphans_support import PORT
from edges.process_support import HELPERS, PYTHON
from inferactors import InferConfig, InferFlavor, ManagedConfig, open_runtime
from inferactors._edges.orphan_record import RECORD_NAME, OrphanRecord, find_orphans
from inferactors._edges.orphan_report import ReapedOrphan
from inferactors._edges.proctable import ProcessStart
from support import Unprivileged


@attrs.define
class FakeTable:
    """Group 500: its leader (500) is gone, its server 501 (started ``member_start``) lives
    until a signal it obeys; the supervisor (499) is gone too. Signals are logged."""

    member_start: float
    now: float = 0.0
    alive: bool = True
    signals: list[tuple[float, int]] = attrs.field(factory=list)

    def boot_id(self) -> str:
        return "boot-1"

    def identify(self, pid: int) -> ProcessStart | None:
        if pid == 501 and self.alive:
            return ProcessStart(501, 500, self.member_start, 900.0)
        return None

    def live_members(self, pgid: int) -> tuple[int, ...]:
        return (501,) if self.alive and pgid == 500 else ()

    def signal_group(self, pgid: int, signum: int) -> None:
        self.signals.append((self.now, signum))
        self.alive = False

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def leaderless_record(instance_dir: Path, *, members: list[list[float]]) -> Path:
    """The record of group 500 (leader 500, supervisor 499) listing ``members``."""
    data = {
        "schema": "inferactors.server-record.v1",
        "pid": 500,
        "pgid": 500,
        "create_time": 1000.0,
        "boot_time": 900.0,
        "boot_id": "boot-1",
        "port": PORT,
        "argv": ["wrapper", "llama-server"],
        "supervisor_pid": 499,
        "supervisor_create_time": 950.0,
        "members": members,
    }
    path = instance_dir / RECORD_NAME
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def wait_members(data_root: Path, timeout_s: float = 60.0) -> tuple[OrphanRecord, int]:
    """Wait until a record under ``data_root`` lists a member besides its leader; return
    the record and that member's pid (blocking: the runtime refreshes once a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in find_orphans(data_root):
            others = [pid for pid, _ in record.members if pid != record.pid]
            if others:
                return record, others[0]
        time.sleep(0.05)
    raise AssertionError(f"no record under {data_root} listed the wrapper's server")


async def sigkill_recording_runtime(
    registry_path: Path,
    program: Path,
    port: int,
    unprivileged: Unprivileged,
    wait_found: Callable[[Path], tuple[OrphanRecord, int]],
) -> tuple[int, OrphanRecord, int]:
    """Run a real runtime (``helpers/fc_supervisor.py``, data root ``program``'s directory's
    ``state``) managing ``program`` on ``port``; once ``wait_found`` sees its server in
    the record, SIGKILL the runtime and reap the wrapper it left (the leader, dead of the
    parent-death signal). Returns the leader's pid, the record and the server's pid."""
    data_root = program.parent / "state"
    argv = [PYTHON, str(HELPERS / "fc_supervisor.py"), str(registry_path), str(data_root)]
    argv += [str(program), str(port), *([unprivileged.run_as] if unprivileged.run_as else [])]
    start = partial(subprocess.Popen, argv, stdout=subprocess.PIPE, stderr=sys.stderr)
    supervisor = await trio.to_thread.run_sync(start)
    try:
        assert supervisor.stdout is not None
        leader = int(await trio.to_thread.run_sync(supervisor.stdout.readline))
        record, server = await trio.to_thread.run_sync(wait_found, data_root)
    finally:
        supervisor.kill()
        supervisor.wait()
        if supervisor.stdout is not None:
            supervisor.stdout.close()
    await trio.to_thread.run_sync(os.waitpid, leader, 0)  # the wrapper died with it: reap
    return leader, record, server


async def reap_in_next_runtime(
    registry_path: Path, program: Path, unprivileged: Unprivileged
) -> ReapedOrphan:
    """Open a runtime on `sigkill_recording_runtime`'s data root; its one reaped orphan."""
    managed = ManagedConfig(
        registry=registry_path, data_root=program.parent / "state", serve_program=program,
        run_as=unprivileged.run_as,
    )  # fmt: skip
    async with open_runtime(InferConfig.managing(InferFlavor.LLAMACPP, managed)) as runtime:
        [reaped] = runtime.reaped_orphans
    return reaped
