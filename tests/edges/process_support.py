"""Shared arrange code for the tests of real processes under ``tests/edges``: the helper
scripts, a stand-in `Launch`, polls of OS state, and the leak check that adopts orphans.

Imported as ``edges.process_support``; the fixtures built on it live in this folder's
``conftest.py``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psutil
import pytest
import trio

from proc_checks import group_members as live_group_members
from proc_checks import is_gone

HELPERS = Path(__file__).parents[1] / "helpers"
PYTHON = sys.executable
PATH_ENV = (("PATH", "/usr/bin:/bin"),)
linux = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not linux, reason="Linux only")
_PR_SET_CHILD_SUBREAPER = 36

GRACEFUL = (
    "import signal, sys, time\n"
    "def bye(*_):\n"
    "    time.sleep(0.5)\n"
    "    open('clean.tmp', 'w').close()\n"
    "    __import__('os').rename('clean.tmp', 'clean')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "open('ready', 'w').close()\n"
    "time.sleep(600)\n"
)
"""A server that takes 0.5 s to shut down on SIGTERM, then writes ./clean and exits 0."""


@attrs.frozen
class Launch:
    """A stand-in for ``_launch.Launch`` (satisfies `LaunchLike`)."""

    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = PATH_ENV


def python_launch(cwd: Path, code: str, env: tuple[tuple[str, str], ...] = PATH_ENV) -> Launch:
    return Launch(Path(PYTHON), ("-c", code), cwd, env)


def wrapper_launch(cwd: Path, mode: str, *command: str) -> Launch:
    args = (str(HELPERS / "fork_wrapper.sh"), mode, str(cwd / "grandchild.pid"), *command)
    return Launch(Path("/bin/sh"), args, cwd)


async def eventually(predicate: Callable[[], bool], timeout_s: float) -> None:
    """Poll OS state (files, process table) until ``predicate`` holds; fail after the timeout."""
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110  no trio event can tell us about OS state
            await trio.sleep(0.005)


async def wait_gone(pid: int, timeout_s: float = 1.0) -> None:
    """Wait for a SIGKILLed ``pid`` to finish dying (its pipes close a moment before).

    If it does not, the test fails and the process is killed, so a failure leaks nothing.
    """
    try:
        await eventually(lambda: is_gone(pid), timeout_s)
    except trio.TooSlowError:
        os.kill(pid, signal.SIGKILL)
        raise


async def wait_group_empty(pgid: int, timeout_s: float = 1.0) -> None:
    """Wait until no live (non-zombie) process is left in group ``pgid``."""
    await eventually(lambda: not live_group_members(pgid), timeout_s)


async def wait_for_file(path: Path, timeout_s: float = 10.0) -> str:
    """Wait for a helper to write ``path`` (helpers write a temporary file and rename it)."""
    await eventually(path.exists, timeout_s)
    return await trio.Path(path).read_text()


def _set_subreaper(on: bool) -> None:
    """PR_SET_CHILD_SUBREAPER: orphans of our descendants become our children, not init's."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(int(on)), 0, 0, 0) == 0


@contextmanager
def no_leaked_descendants() -> Iterator[None]:
    """Fail if a process of ours is left running at the end; reap the dead it orphaned.

    Meanwhile the test process is a child subreaper, so a grandchild orphaned by a test
    (a killed wrapper's child, a SIGKILLed supervisor's server) is ours to see and reap,
    rather than a zombie left to an init that does not reap.
    """
    if linux:
        _set_subreaper(True)
    try:
        yield
    finally:
        if linux:
            _set_subreaper(False)
        leaked = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    leaked.append(child)
                    child.kill()
                os.waitpid(child.pid, 0)
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
        assert leaked == [], f"leaked child processes: {leaked}"
