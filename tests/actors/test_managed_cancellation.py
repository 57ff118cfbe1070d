"""Managed commands are always answered, and leaving the runtime stops servers gracefully.

An unload during a start answers the start and a stop waiting behind it; a stop whose
caller gave up still stops the server and breaks nothing; a bad stop grace fails only that
call. Cancelling `serve_runtime`, or leaving `open_runtime` under cancellation, sends
SIGTERM first and is prompt (the helper server notes the SIGTERM in a file).
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable

import pytest
import trio
import trio.testing

from actors.managed_support import READY_S, Lab, black_hole, chat, next_exit, read_pid, wait_gone
from inferactors import (
    InferactorsError,
    InferRuntime,
    InstanceState,
    InvalidConfig,
    StopReason,
    open_runtime,
    serve_runtime,
)

# Commands that must always be answered.


async def test_unload_during_a_start_answers_the_start_and_a_waiting_stop(
    lab: Lab, free_port: int
) -> None:
    answers: list[object] = []

    async def ask(command: Awaitable[object]) -> None:
        with trio.fail_after(2):
            try:
                answers.append(await command)
            except InferactorsError as error:
                answers.append(error)

    config = lab.config(behaviour="silent")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        with black_hole(free_port):  # the start's port check now takes 300 ms
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, runtime.start(handle))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(ask, runtime.stop(handle, 1.0))
                await trio.testing.wait_all_tasks_blocked()
                await runtime.unload(handle)
    assert len(answers) == 2


async def test_a_stop_whose_caller_gave_up_still_stops_and_breaks_nothing(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,ignore-term")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await read_pid(lab.data_root / handle.instance_id / "pid")  # SIGTERM is ignored by now
        with trio.move_on_after(0.1):
            await runtime.stop(handle, 0.5)
        ended = await next_exit(events)
        assert ended.reason is StopReason.REQUESTED
        await trio.sleep(0.2)
        assert (runtime.status(handle)).state is InstanceState.EXITED
        nursery.cancel_scope.cancel()


async def test_a_negative_stop_grace_fails_only_that_call(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        with pytest.raises((InvalidConfig, ValueError)):
            await runtime.stop(handle, -1.0)
        evidence = await runtime.stop(handle, 5.0)
        assert evidence.signal == signal.SIGTERM
        nursery.cancel_scope.cancel()


# Leaving the runtime.


async def test_cancelling_serve_runtime_sends_sigterm_first(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent,note-term")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        nursery.cancel_scope.cancel()
    await wait_gone(pid)
    assert (lab.data_root / handle.instance_id / "term").exists(), "the server got no SIGTERM"


async def test_leaving_open_runtime_under_cancellation_is_prompt_and_graceful(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,note-term")
    with trio.move_on_after(READY_S) as scope:
        async with open_runtime(config, stop_grace_s=0.1) as runtime:
            handle = await runtime.load(chat(free_port))
            await runtime.start(handle)
            await read_pid(lab.data_root / handle.instance_id / "pid")
            scope.cancel()
            cancelled_at = trio.current_time()
            await trio.sleep_forever()
    assert trio.current_time() - cancelled_at < 3.0
    assert (lab.data_root / handle.instance_id / "term").exists(), "the server got no SIGTERM"
