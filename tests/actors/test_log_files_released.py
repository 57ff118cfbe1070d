"""An instance's log file is closed when its actor ends (unloaded, or its runtime closed):
a program that loads and unloads instances for days keeps no writer thread and no open
file per instance it ever had (the breaker saw one of each per load, for the process's
life). The lines stay in memory, and a load of the same id goes on writing the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import trio

from actors.managed_support import READY_S, Lab, chat
from inferactors import InstanceState, open_runtime

LOADS = 5


def writer_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.endswith("(_monitor)"))


def open_logs(data_root: Path) -> int:
    logs = str(data_root / "logs")
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd).startswith(logs))


async def released(threads: int, data_root: Path) -> None:
    """Wait (at most 5 s) until only ``threads`` writer threads are left and no log is open."""
    with trio.fail_after(5):
        while writer_threads() > threads or open_logs(data_root):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_load_unload_cycles_leave_no_writer_thread_or_open_log(
    lab: Lab, free_port: int
) -> None:
    threads_before = writer_threads()
    async with open_runtime(lab.config(), node_id="n") as runtime:
        for index in range(LOADS):
            handle = await runtime.load(chat(free_port, role=f"r{index}"))
            with trio.fail_after(READY_S):
                await runtime.start(handle)
                await runtime.wait_state(handle, InstanceState.RUNNING)
            assert writer_threads() == threads_before + 1  # its file, while it is loaded
            await runtime.stop(handle, 5.0)
            await runtime.unload(handle)
            await released(threads_before, lab.data_root)  # as its actor ends
        again = await runtime.load(chat(free_port, role="r0"))  # the first id once more
        log = lab.data_root / "logs" / f"{again.instance_id}.log"
        size = log.stat().st_size
        with trio.fail_after(READY_S):
            await runtime.start(again)
            await runtime.wait_state(again, InstanceState.RUNNING)
        await runtime.stop(again, 5.0)
    assert log.stat().st_size > size  # written again after its release
    await released(threads_before, lab.data_root)
