"""`ManagedProcess.tree_shape`: ``(pid, pgid)`` of the server's descendants at the last
look, which the record refresh compares to skip an unchanged tree. A real tree: a shell
that starts a child in its group and one in a session of its own (``setsid``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import attrs
import pytest
import trio

from inferactors._edges.process import ManagedProcess


@attrs.frozen
class ShellLaunch:
    program: Path = Path("/bin/sh")
    args: tuple[str, ...] = ("-c", "sleep 60 & setsid sleep 61 & wait")
    cwd: Path = Path("/")
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


async def shape_with(process: ManagedProcess, groups: int) -> frozenset[tuple[int, int]]:
    """The shape once its descendants are in ``groups`` groups, one process each."""
    with trio.fail_after(10):
        while True:
            process.track_descendants()
            shape = process.tree_shape
            assert shape is not None
            if len(shape) == groups == len({pgid for _, pgid in shape}):
                return shape
            await trio.sleep(0.02)


async def test_the_shape_names_each_descendant_with_its_group_and_follows_an_exit(
    nursery: trio.Nursery,
) -> None:
    if not hasattr(os, "pidfd_open"):
        pytest.skip("descendants are tracked through pidfds (Linux 5.3+)")
    process = await ManagedProcess.spawn(nursery, ShellLaunch())
    try:
        shape = await shape_with(process, 2)
        groups = sorted(pgid for _, pgid in shape)
        assert process.pgid in groups  # `sleep 60`, in the server's group
        assert [g for g in groups if g != process.pgid] != []  # `setsid sleep 61`: its own
        in_group = next(pid for pid, pgid in shape if pgid == process.pgid)
        os.kill(in_group, signal.SIGKILL)
        after = await shape_with(process, 1)
        assert after < shape  # the same tree less the one that exited
    finally:
        await process.terminate(5.0)
