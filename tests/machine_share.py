"""Parallel runs (pytest-xdist) in which some tests still have the machine to themselves.

`make test` runs the suite on several workers: most tests wait (for a server to start, a
deadline, a process to exit) and share the CPU well. A few measure real time against a
bound (an event loop answers within 0.1 s while a model is hashed; a call ends within
1.45 s of its 1 s deadline): those are marked ``exclusive`` and run while no other test
of the session runs, as they would in a serial run.

Every test of a parallel run takes a shared lock for its setup, call and teardown; an
``exclusive`` test takes it exclusively. A second lock, the turnstile, is held while
waiting, so a waiting exclusive test is not starved by tests that keep starting on other
workers. Consecutive exclusive tests on one worker keep the exclusive lock between them
(``--dist loadgroup`` sends them all to one worker: they carry ``xdist_group("exclusive")``).

The locks are ``flock`` on two files in a directory the controlling process creates
(`MachineShare.create`) and names to its workers in the environment (`LOCKS_ENV`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import attrs
import pytest
from _pytest.nodeid import NodeId

LOCKS_ENV = "INFERACTORS_TEST_LOCKS"
"""The environment variable naming the session's lock directory to its workers."""

MARKER = "exclusive"
"""The marker of a test that must have the machine to itself."""


@attrs.define(eq=False)
class MachineShare:
    """One process's handle on the session's two locks (module docstring)."""

    turnstile: int
    machine: int
    alone: bool = False
    held: bool = False

    @classmethod
    def create(cls) -> Path:
        """A fresh lock directory for a session, named in ``os.environ[LOCKS_ENV]`` (so
        workers started after this inherit it); remove it with `remove`."""
        directory = Path(tempfile.mkdtemp(prefix="inferactors-test-locks-"))
        for name in ("turnstile", "machine"):
            (directory / name).touch()
        os.environ[LOCKS_ENV] = str(directory)
        return directory

    @classmethod
    def remove(cls, directory: Path) -> None:
        """Delete the lock directory made by `create`."""
        shutil.rmtree(directory, ignore_errors=True)

    @classmethod
    def join(cls) -> MachineShare | None:
        """This worker's handle, or None outside a parallel run."""
        directory = os.environ.get(LOCKS_ENV)
        if not directory or "PYTEST_XDIST_WORKER" not in os.environ:
            return None
        turnstile = os.open(Path(directory) / "turnstile", os.O_RDWR | os.O_CLOEXEC)
        machine = os.open(Path(directory) / "machine", os.O_RDWR | os.O_CLOEXEC)
        return cls(turnstile, machine)

    def enter(self, *, alone: bool) -> None:
        """Take the machine: shared, or ``alone`` (exclusively). Blocks until it is had.
        An exclusive hold kept from the previous test is reused."""
        if self.held and self.alone == alone:
            return
        self.leave()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.alone, self.held = alone, True

    def leave(self) -> None:
        """Give the machine back (nothing when it is not held)."""
        if self.held:
            fcntl.flock(self.machine, fcntl.LOCK_UN)
            self.held = False


def name_xdist_groups(items: list[pytest.Item]) -> None:
    """Give each item marked ``xdist_group(NAME)`` the node id ``<id>@NAME``, which is how
    ``--dist loadgroup`` learns its group, when pytest-xdist could not: xdist 3.8 writes
    ``item._nodeid``, which pytest 9.1+ no longer reads (its node ids are `NodeId` values
    in ``item._id``). Items already named, or run without loadgroup, are left alone."""
    for item in items:
        names = sorted(
            {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
        )  # fmt: skip
        suffix = "@" + "_".join(names)
        node_id = getattr(item, "_id", None)
        if names and not item.nodeid.endswith(suffix) and isinstance(node_id, NodeId):
            last = node_id.names[-1] + ("" if node_id.params is None else f"[{node_id.params}]")
            item._id = NodeId(path=node_id.path, names=(*node_id.names[:-1], last + suffix))
