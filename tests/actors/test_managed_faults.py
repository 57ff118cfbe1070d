"""Managed llama.cpp servers that misbehave, played by the helper server.

Checklist items 42, 46 to 50 and 52. ``tests/helpers/runtime_server.py`` stays silent,
forks, ignores SIGTERM or exits on its own as ``RUNTIME_SERVER`` says: a server not
listening yet is Degraded "starting", a port taken between load and start spawns nothing,
a group deaf to SIGTERM is killed once the grace is over, an exit of its own is a crash
(the whole group reaped), unload stops a running server and deletes its directory, and a
serve program gone before start is refused.
"""

from __future__ import annotations

import re
import signal

import pytest
import trio
import trio.testing

from actors.managed_support import (
    Lab,
    chat,
    drain,
    exits,
    gone,
    listening,
    next_exit,
    read_pid,
    ready,
    started,
    wait_gone,
)
from inferactors import (
    AdmissionRefused,
    BackendError,
    InstanceState,
    InvalidState,
    StopReason,
    open_runtime,
)


async def test_a_server_not_listening_yet_is_degraded_starting(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        status = runtime.status(handle)
        assert status.state is InstanceState.DEGRADED
        assert status.detail is not None
        assert status.detail.startswith("starting: not listening yet")
        assert status.pid == pid
        evidence = await runtime.stop(handle, 5.0)
        assert (evidence.exit_code, evidence.signal) == (None, signal.SIGTERM)
        assert not evidence.killed_after_grace


async def test_a_port_taken_between_load_and_start_spawns_nothing(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with listening(free_port), pytest.raises(BackendError) as refused:
            await runtime.start(handle)
        assert str(refused.value) == (
            f"http://127.0.0.1:{free_port} is already taken by something else; not starting over it"
        )
        assert not (lab.data_root / handle.instance_id / "pid").exists()
        assert (runtime.status(handle)).state is InstanceState.LOADED
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        assert started(drain(events)) == []
        await runtime.start(handle)  # the port is free again
        await ready(runtime, handle)


async def test_stop_kills_a_group_that_ignores_sigterm_once_the_grace_is_over(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,ignore-term,fork")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        asked = trio.current_time()
        evidence = await runtime.stop(handle, 0.5)
        took_s = trio.current_time() - asked
        assert (evidence.exit_code, evidence.signal) == (None, signal.SIGKILL)
        assert evidence.killed_after_grace
        assert took_s >= 0.5
        await wait_gone(evidence.pid)
        await wait_gone(child)
        status = runtime.status(handle)
        assert (status.state, status.exit_code, status.stop_reason) == (
            InstanceState.EXITED,
            None,
            "requested",
        )


async def test_a_server_that_exits_on_its_own_is_exited_as_a_crash(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,fork,exit=3@0.3")
    async with open_runtime(config) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        crash = await next_exit(events)
        assert (crash.instance_id, crash.pid, crash.reason) == (
            handle.instance_id,
            pid,
            StopReason.CRASH,
        )
        assert (crash.exit_code, crash.signal) == (3, None)
        status = runtime.status(handle)
        assert (status.state, status.detail) == (InstanceState.EXITED, "server process exited")
        assert (status.exit_code, status.stop_reason, status.pid) == (3, "crash", None)
        await wait_gone(child)  # the whole group is reaped, not just the leader
        stopped = await runtime.stop(handle)  # given up (no restarts): answered, view kept
        assert (stopped.pid, stopped.exit_code) == (pid, 3)
        assert runtime.status(handle).stop_reason == "crash"
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        (lab.data_root / handle.instance_id / "pid").unlink()
        await runtime.start(handle)  # an operator may start it again
        assert await read_pid(lab.data_root / handle.instance_id / "pid") != pid


async def test_unload_stops_a_running_server_and_deletes_its_directory(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="serve,fork")
    async with open_runtime(config) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        pid = (runtime.status(handle)).pid
        assert pid is not None
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        await runtime.unload(handle)
        assert gone(pid), "unload returned while the server still ran"
        assert not (lab.data_root / handle.instance_id).exists()
        assert (runtime.status(handle)).state is InstanceState.UNKNOWN
        await wait_gone(child)
        assert [event.reason for event in exits(drain(events))] == [StopReason.UNLOAD]


async def test_a_serve_program_gone_before_start_is_refused_and_spawns_nothing(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        await trio.Path(lab.program).unlink()
        # BackendError "cannot start ..." as the start docstring says; as root, the run_as
        # reachability check refuses first with AdmissionRefused "... does not exist".
        with pytest.raises((BackendError, AdmissionRefused), match=re.escape(str(lab.program))):
            await runtime.start(handle)
        assert (runtime.status(handle)).state is InstanceState.LOADED
        assert started(drain(events)) == []
