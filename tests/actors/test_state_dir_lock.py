"""Tests of issue 8 item 9, one state directory, one supervisor: `open_runtime` takes an
``flock`` on the ``data_root`` directory (``_edges/state_lock.py``), so a second
supervisor process is refused at once, naming the running one's pid; the lock goes with
its holder, however it ends; runtimes of one process share it (the CLI opens one per flavor).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from inferactors import (
    InferConfig,
    InferFlavor,
    InvalidState,
    ManagedConfig,
    open_runtime,
)
from inferactors._edges.state_lock import LOCK_NAME

HELPER = Path(__file__).parents[1] / "helpers" / "idle_runtime.py"


def config(data_root: Path, flavor: InferFlavor = InferFlavor.LLAMACPP) -> InferConfig:
    managed = ManagedConfig(registry=data_root / "models.json", data_root=data_root)
    return InferConfig.managing(flavor, managed)


@contextmanager
def other_supervisor(data_root: Path) -> Iterator[subprocess.Popen[str]]:
    """A supervisor process on ``data_root``, running once it has said ``ready``."""
    process = subprocess.Popen(
        [sys.executable, str(HELPER), str(data_root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        yield process
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def second_supervisor_says(data_root: Path) -> tuple[int, str]:
    """Run one more supervisor process on ``data_root``: its exit status and first line."""
    done = subprocess.run(
        [sys.executable, str(HELPER), str(data_root)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout.splitlines()[0] if done.stdout else ""


async def test_a_second_supervisor_is_refused_at_once_naming_the_running_ones_pid(
    tmp_path: Path,
) -> None:
    data_root = tmp_path / "state"
    with other_supervisor(data_root) as running:
        asked = trio.current_time()
        with pytest.raises(InvalidState) as refused:
            async with open_runtime(config(data_root)):
                pytest.fail("a second supervisor opened the same data_root")
        took_s = trio.current_time() - asked
    assert str(refused.value) == (
        f"data_root {data_root.resolve()} is in use by another supervisor "
        f"(pid {running.pid}); one state directory has one supervisor"
    )
    assert took_s < 1.0


async def test_deleting_the_pid_file_does_not_let_a_second_supervisor_in(tmp_path: Path) -> None:
    """The directory itself is locked: a second process that finds no ``supervisor.lock``
    (a hostile tester unlinked it) is still refused, and the holder's pid is written again
    by the next supervisor only once the holder is gone."""
    data_root = tmp_path / "state"
    with other_supervisor(data_root) as running:
        (data_root / LOCK_NAME).unlink()
        status, said = await trio.to_thread.run_sync(second_supervisor_says, data_root)
        assert (status, said) == (3, f"refused: data_root {data_root.resolve()} is in use by "
                                     "another supervisor (its pid is unknown); one state "
                                     "directory has one supervisor")  # fmt: skip
        (data_root / LOCK_NAME).write_text("4242\n")  # a forged pid file: no lock either
        status, _ = await trio.to_thread.run_sync(second_supervisor_says, data_root)
        assert status == 3
        running.kill()
        running.wait()
    async with open_runtime(config(data_root)):
        assert (data_root / LOCK_NAME).read_text() == f"{os.getpid()}\n"


async def test_the_lock_of_a_sigkilled_supervisor_does_not_block(tmp_path: Path) -> None:
    data_root = tmp_path / "state"
    with other_supervisor(data_root) as running:
        running.send_signal(signal.SIGKILL)
        running.wait()
    assert (data_root / LOCK_NAME).read_text() == f"{running.pid}\n", "the stale file stays"
    async with open_runtime(config(data_root)):
        assert (data_root / LOCK_NAME).read_text() == f"{os.getpid()}\n"


async def test_the_lock_is_released_when_the_runtime_exits(tmp_path: Path) -> None:
    data_root = tmp_path / "state"
    async with open_runtime(config(data_root)):
        status, said = await trio.to_thread.run_sync(second_supervisor_says, data_root)
        assert (status, said) == (3, f"refused: data_root {data_root.resolve()} is in use by "
                                     f"another supervisor (pid {os.getpid()}); one state "
                                     "directory has one supervisor")  # fmt: skip
    with other_supervisor(data_root):
        pass  # another process takes it now


async def test_runtimes_of_one_process_share_the_lock_until_the_last_exits(
    tmp_path: Path,
) -> None:
    data_root = tmp_path / "state"
    async with open_runtime(config(data_root)):
        async with open_runtime(config(data_root, InferFlavor.MLX_LM)):
            status, _ = await trio.to_thread.run_sync(second_supervisor_says, data_root)
            assert status == 3
        status, _ = await trio.to_thread.run_sync(second_supervisor_says, data_root)
        assert status == 3, "the first runtime still holds it"
    with other_supervisor(data_root):
        pass


async def test_adopted_runtimes_take_no_lock(tmp_path: Path) -> None:
    data_root = tmp_path / "state"
    with other_supervisor(data_root):
        async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)):
            pass
