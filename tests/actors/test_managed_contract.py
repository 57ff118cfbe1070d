"""A managed llama.cpp instance through the whole runtime contract, and racing commands.

The real llama-server (as ``nobody`` when the suite runs as root) goes through load,
start, deep health, stop and unload with the instance id, events and evidence checked
(seed-behaviour checklist items 1, 31, 62, 71 and 72; sections 4 and 7); two concurrent
starts spawn one server; a stop sent during a start aborts it and stops the new server
(the helper server, its port check slowed). Tests named after a bug guard its fix.
"""

from __future__ import annotations

import signal
from pathlib import Path

import blake3
import pytest
import trio
import trio.testing

from actors.managed_support import READY_S, Lab, chat, drain, exits, ready, started, wait_gone
from inferactors import (
    ControlMode,
    InferactorsError,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InvalidState,
    NetworkExposure,
    StopReason,
    Unsupported,
    open_runtime,
)
from inferactors._edges.bundle import Edges
from inferactors._edges.netcheck import port_in_use


async def test_a_real_llama_server_through_the_whole_contract(
    lab: Lab, llama_server: Path, tiny_gguf: Path, free_port: int
) -> None:
    config = lab.config(llama_server)
    async with open_runtime(config, node_id="node1") as runtime:
        assert runtime.id == "infer.llamacpp"
        assert runtime.control_mode is ControlMode.MANAGED
        assert runtime.network_exposure is NetworkExposure.NONE
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        material = f"chatinfer.llamacpptinyhttp://127.0.0.1:{free_port}managed"
        digest = blake3.blake3(material.encode()).hexdigest()[:8]
        assert handle.instance_id == f"chat-{digest}-node1"
        assert (lab.data_root / handle.instance_id).is_dir()
        assert (runtime.status(handle)).state is InstanceState.LOADED
        assert await runtime.served_model(handle) == "tiny"
        with pytest.raises(Unsupported, match=r"cannot re-adopt .*not recoverable"):
            await runtime.adopt(handle, chat(free_port))
        with pytest.raises(Unsupported, match="has no console run"):
            await runtime.console(handle)

        await runtime.start(handle)
        with pytest.raises(InvalidState, match="already running"):
            await runtime.start(handle)
        await ready(runtime, handle)
        token = await runtime.deep_health(handle)
        assert token.text.strip()
        assert token.finish_reason == "length"

        evidence = await runtime.stop(handle, 5.0)
        assert (evidence.runtime, evidence.instance_id) == ("infer.llamacpp", handle.instance_id)
        assert evidence.exit_code == 0 or evidence.signal == signal.SIGTERM
        assert not evidence.killed_after_grace
        planned = str(await trio.Path(tiny_gguf).resolve())  # served from its verified fd
        assert (evidence.args[0], evidence.args[2:4]) == ("-m", ("--alias", planned))
        assert evidence.args[1].startswith("/proc/self/fd/")
        await wait_gone(evidence.pid)
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        stopped = runtime.status(handle)
        assert (stopped.state, stopped.stop_reason, stopped.pid) == (
            InstanceState.EXITED,
            "requested",
            None,
        )
        await runtime.unload(handle)
        assert not (lab.data_root / handle.instance_id).exists()
        assert (runtime.status(handle)).state is InstanceState.UNKNOWN
    seen = drain(events)
    assert [event.pid for event in started(seen)] == [evidence.pid]
    assert [event.reason for event in exits(seen)] == [StopReason.REQUESTED]


async def test_two_concurrent_starts_spawn_one_real_server(
    lab: Lab, llama_server: Path, free_port: int
) -> None:
    async with open_runtime(lab.config(llama_server)) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        outcomes: list[object] = []

        async def start() -> None:
            try:
                await runtime.start(handle)
            except InferactorsError as error:
                outcomes.append(error)
            else:
                outcomes.append(None)

        with trio.fail_after(READY_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start)
                nursery.start_soon(start)
        assert outcomes == [None, None]  # one start, one outcome for both (issue 9 item 8)
        await ready(runtime, handle)
        await runtime.stop(handle, 5.0)
        assert len(started(drain(events))) == 1


async def test_a_stop_sent_during_a_start_aborts_it_and_stops_the_new_server(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent")
    outcome: list[object] = []

    async def start(runtime: InferRuntime, handle: InstanceHandle) -> None:
        try:
            await runtime.start(handle)
        except InferactorsError as error:
            outcome.append(error)
        else:
            outcome.append(None)

    async def slow_port_check(host: str, port: int) -> bool:
        await trio.sleep(0.3)  # a port check that takes a while: the stop arrives meanwhile
        return await port_in_use(host, port)

    async with open_runtime(config, edges=Edges(port_in_use=slow_port_check)) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with trio.fail_after(READY_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start, runtime, handle)
                await trio.testing.wait_all_tasks_blocked()
                evidence = await runtime.stop(handle, 5.0)
        # Issue 3: a stop during a start aborts the start (unless the spawn won the race).
        assert outcome == [None] or (
            isinstance(outcome[0], InvalidState) and "aborted by a stop" in str(outcome[0])
        ), outcome
        assert evidence.instance_id == handle.instance_id
        assert evidence.signal == signal.SIGTERM
        await wait_gone(evidence.pid)
        assert (runtime.status(handle)).state is InstanceState.EXITED
        await trio.testing.wait_all_tasks_blocked()  # status() no longer flushes the relay
        seen = drain(events)
        assert [event.pid for event in started(seen)] == [evidence.pid]
        assert [event.reason for event in exits(seen)] == [StopReason.REQUESTED]
