"""Tests of the forker and the exec helper (issue 11, profile point 5; issue 16 item 2): a
managed spawn starts the helper from a thread of its own with ``posix_spawn``, so the event
loop runs while the child sets itself up and execs; the child outlives the thread that
asked for it (the parent-death signal follows the forker, which never ends); a spawn
cancelled mid-setup still hands its child over, so that it can be stopped; and a failed
exec or setup is raised in the caller with the helper's errno and words.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from edges.process_support import linux_only
from inferactors._edges import spawn
from inferactors._edges.spawn import PosixChild, open_child_process
from proc_checks import is_gone

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

SLEEP = ["/bin/sleep", "600"]
ENV = {"PATH": "/usr/bin:/bin"}
SETUP_S = 0.3


@pytest.fixture
def slow_child_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every child spends `SETUP_S` in its setup, between fork and exec (the helper's
    test-only ``pause_s``)."""
    real = spawn.child_plan

    def slow(*args: Any) -> dict[str, object]:
        return {**real(*args), "pause_s": SETUP_S}

    monkeypatch.setattr(spawn, "child_plan", slow)


async def kill(child: PosixChild) -> None:
    child.signal_group(signal.SIGKILL)
    await child.wait_exiting()
    child.reap()
    await child.stdout.aclose()
    await child.stderr.aclose()


@pytest.mark.usefixtures("slow_child_setup")
async def test_the_loop_runs_while_a_child_is_set_up(tmp_path: Path) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        await trio.sleep(0.02)
        before = ticks
        child = await open_child_process(SLEEP, cwd=tmp_path, env=ENV)
        during = ticks - before
        nursery.cancel_scope.cancel()
    await kill(child)
    assert during >= SETUP_S / 0.01 / 3  # the loop ticked through the 0.3 s setup (was 0)


@linux_only
def test_a_child_outlives_the_thread_that_spawned_it(tmp_path: Path) -> None:
    """The parent-death signal follows the forking thread: were the child forked by the
    thread running trio, it would be SIGKILLed when that thread ends."""
    children: list[PosixChild] = []

    async def spawn_one() -> None:
        children.append(await open_child_process(SLEEP, cwd=tmp_path, env=ENV))

    thread = threading.Thread(target=trio.run, args=(spawn_one,))
    thread.start()
    thread.join()
    (child,) = children
    try:
        time.sleep(0.3)
        assert not is_gone(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.reap()


@pytest.mark.usefixtures("slow_child_setup")
async def test_a_spawn_cancelled_mid_fork_still_returns_its_child(tmp_path: Path) -> None:
    child: PosixChild | None = None
    with trio.move_on_after(SETUP_S / 3) as scope:
        child = await open_child_process(SLEEP, cwd=tmp_path, env=ENV)
    assert child is not None  # the fork was waited for, and its child handed over
    assert not scope.cancelled_caught
    assert not is_gone(child.pid)
    await kill(child)


async def test_a_failed_exec_raises_in_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="exec: No such file or directory"):
        await open_child_process([str(tmp_path / "missing")], cwd=tmp_path, env=ENV)


async def test_a_failed_setup_raises_in_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="setup: No such file or directory"):
        await open_child_process(SLEEP, cwd=tmp_path / "gone", env=ENV)


async def test_the_spawn_is_a_posix_spawn_of_the_isolated_helper(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[list[str]] = []
    real = os.posix_spawn

    def recorded(path: str, argv: list[str], *args: Any, **kwargs: Any) -> int:
        seen.append(list(argv))
        return real(path, argv, *args, **kwargs)

    monkeypatch.setattr(os, "posix_spawn", recorded)
    child = await open_child_process(SLEEP, cwd=tmp_path, env=ENV)
    await kill(child)
    [argv] = seen
    assert argv[1:4] == ["-I", "-S", str(spawn.HELPER)]  # no preexec_fn, no fork of us
