"""Issue 8, "Truthful" and item 8 (graceful stop): a Running real llama-server frozen by
SIGSTOP.

Its status says the process is stopped and not answering (never "starting: not listening
yet", which it read before the fix); SIGCONT brings Running back; and a stop of the frozen
server ends it by its SIGTERM well within the grace, because a SIGCONT follows the SIGTERM
(as systemd does) — before the fix it was SIGKILLed after the whole grace.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import trio

from actors.managed_support import Lab, chat, ready
from inferactors import InstanceState, open_runtime

FROZEN = "process is stopped (SIGSTOP/SIGTSTP): not answering: "


async def test_a_frozen_running_server_says_it_is_stopped_then_runs_again(
    lab: Lab, llama_server: Path, free_port: int
) -> None:
    async with open_runtime(lab.config(llama_server, probe_timeout_s=1.0)) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        pid = (runtime.status(handle)).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with trio.fail_after(10):  # the monitor probes every second
                while not ((frozen := runtime.status(handle)).detail or "").startswith(  # noqa: ASYNC110
                    FROZEN
                ):
                    await trio.sleep(0.05)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert frozen.state is InstanceState.DEGRADED
        assert frozen.detail is not None
        assert frozen.detail.startswith(FROZEN), frozen.detail
        assert "GET /health: no complete reply within 1 s" in frozen.detail
        assert frozen.pid == pid
        with trio.fail_after(10):
            back = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert (back.pid, back.detail) == (pid, "server up")
        await runtime.stop(handle, 5.0)


async def test_a_stop_of_a_frozen_server_ends_it_by_sigterm_within_the_grace(
    lab: Lab, llama_server: Path, free_port: int
) -> None:
    async with open_runtime(lab.config(llama_server)) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        pid = (runtime.status(handle)).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        began = trio.current_time()
        evidence = await runtime.stop(handle, 3.0)
        took = trio.current_time() - began
        assert not evidence.killed_after_grace, evidence
        assert evidence.exit_code == 0 or evidence.signal == signal.SIGTERM, evidence
        assert took < 1.5, took
