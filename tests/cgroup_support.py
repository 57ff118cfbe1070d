"""A cgroup (v2) of the test's own, for the tests of one cgroup per server: made under the
unified hierarchy when this process may (root, cgroup v2 mounted), removed afterwards with
everything in it killed. Where the host cannot, the test is skipped and says why (``-ra``
lists the reason in the test output)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from inferactors._edges.cgroups import ServerCgroup, cgroup2_mount, cgroup_path

CANNOT = "the cgroup variant cannot run on this host"


@contextmanager
def made_cgroup() -> Iterator[Path]:
    """A new, empty cgroup directly under the cgroup v2 mount, ours to write; on exit every
    process still in it (or in any cgroup under it) is SIGKILLed and it is removed."""
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip(f"cgroup v2 is not mounted: {CANNOT}")
    path = mount / f"inferactors-test-{uuid.uuid4().hex[:10]}"
    try:
        path.mkdir()
    except OSError as error:
        pytest.skip(f"this process may not make a cgroup under {mount} ({error}): {CANNOT}")
    try:
        yield path
    finally:
        remove_tree(path)


KILL_WAIT_S = 2.0
"""How long `kill` waits for a cgroup to empty, seconds."""


def kill(cgroup: ServerCgroup, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every member of ``cgroup`` (and whatever they fork meanwhile: its
    `ServerCgroup.request_kill`); whether it is empty within ``wait_s`` seconds. Blocking:
    the tests' cleanup (the runtime never waits like this)."""
    deadline = time.monotonic() + wait_s
    while True:
        if not cgroup.members():
            return True
        cgroup.request_kill()
        if time.monotonic() >= deadline:
            return not cgroup.members()
        time.sleep(0.01)


def enter_self(fd: int) -> None:
    """In a child started by a test (``preexec_fn``, between fork and exec): move this
    process into the cgroup whose ``cgroup.procs`` ``fd`` is (`ServerCgroup.procs_fd`), as
    the exec helper (``spawn_child.py``) does for a server. Only a system call: safe after
    a fork."""
    os.write(fd, b"0")


def remove_tree(path: Path) -> None:
    """Kill whatever ``path`` and the cgroups under it hold, then remove them, deepest first."""
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            kill(ServerCgroup(child))
            child.rmdir()
    kill(ServerCgroup(path))
    path.rmdir()


def start_in_cgroup(cgroup: Path, argv: list[str], **popen: object) -> subprocess.Popen[str]:
    """``argv`` started inside ``cgroup`` from its exec on (its ``sh`` moves itself in,
    then execs ``argv``), so whatever it forks is in there too."""
    moved = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"'
    command = ["/bin/sh", "-c", moved, "sh", *argv]
    return subprocess.Popen(command, **popen)  # type: ignore[call-overload, no-any-return]


def in_cgroup(pid: int, cgroup: Path) -> bool:
    """Whether process ``pid`` is in ``cgroup``."""
    return cgroup_path(pid) == cgroup
