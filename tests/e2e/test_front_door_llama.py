"""The front door's scheduler with the real llama-server on two tiny models, on demand,
under a budget that holds one: the first request starts its model; a request for the
other evicts the idle one (and waits while the first serves); the declared KV cache is
what the server itself logs; measures come in; closing stops everything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import httpx
import psutil
import pytest
import trio

from inferactors import (
    InferConfig,
    InstanceResidency,
    ModelRegistry,
    ResidencySection,
    ResidencyStop,
    StopReason,
    door_members,
    door_settings,
    open_runtime,
    open_scheduler,
)
from inferactors._actors.front_door_scheduler import FrontDoorScheduler
from inferactors._actors.front_door_seam import Grant, Residency
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._config.config import ManagedConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.memory_gauge import PsutilGauge
from inferactors._events import Event, ProcessExited, ProcessStarted
from inferactors._flavor import InferFlavor
from inferactors._policy.buffer_lines import BufferKind, EngineBuffers
from inferactors.testing import write_tiny_gguf
from inferactors.testing._fake_processes import free_port
from support import Unprivileged

pytestmark = pytest.mark.llama_server

BOUND_S = 60.0
BUDGET = 30_000_000
"""Bytes: one tiny llama-server (about 19.7 MB expected, 17 to 18 MB measured) fits;
two do not."""
DECLARED = 522_336 + 524_288
"""The tiny model's pinned shard bytes, plus its KV cache at ``-c 2048 -np 2`` (f16)."""


@attrs.define(eq=False)
class Door:
    runtime: InferRuntime
    door: FrontDoorScheduler
    handles: dict[str, InstanceHandle]
    events: list[Event]

    def pid(self, role: str) -> int | None:
        for event in reversed(self.events):
            if isinstance(event, ProcessStarted) and event.instance_id == self.iid(role):
                return event.pid
        return None

    def iid(self, role: str) -> str:
        return self.handles[role].instance_id


@pytest.fixture
def two_models(
    tmp_path: Path,
    tiny_gguf: Path,
    unprivileged: Unprivileged,
    server_dir: Path,
    llama_server: Path,
) -> InferConfig:
    registry = tmp_path / "models.json"
    models = ModelRegistry.open(registry)
    models.add(tiny_gguf, name="tiny")
    other = unprivileged.directory("second") / "tiny2.gguf"
    models.add(write_tiny_gguf(other, seed=1, name="tiny-random-llama-2"), name="tiny2")
    managed = ManagedConfig(
        registry=registry,
        data_root=server_dir / "state",
        serve_program=llama_server,
        run_as=unprivileged.run_as,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


def _spec(role: str, model: str) -> InferenceSpec:
    args = ("-np", "2", "-lv", "4")  # verbosity 4: the server logs its buffer sizes
    serve = ServeArgs(port=free_port(), ctx=2048, extra_args=args)
    return InferenceSpec(role=role, runtime=InferFlavor.LLAMACPP, model=model, serve=serve)


@contextlib.asynccontextmanager
async def door_over_two(config: InferConfig) -> AsyncIterator[Door]:
    events: list[Event] = []
    async with open_runtime(config, node_id="door") as runtime:
        stream = await runtime.subscribe(10_000)
        handles = {
            "alpha": await runtime.load(_spec("alpha", "tiny")),
            "beta": await runtime.load(_spec("beta", "tiny2")),
        }
        on_demand = InstanceResidency(on_demand=True)
        members = await door_members([(runtime, h, on_demand) for h in handles.values()])
        gauge = PsutilGauge()
        settings = await door_settings(
            ResidencySection(budget=BUDGET, max_wait_s=BOUND_S), gauge, 5.0
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, stream, events)
            async with open_scheduler(
                members, settings, gauge=gauge, on_event=events.append
            ) as door:
                yield Door(runtime, door, handles, events)
            nursery.cancel_scope.cancel()


async def _collect(stream: trio.MemoryReceiveChannel[Event], events: list[Event]) -> None:
    async for event in stream:
        events.append(event)


async def _complete(grant: Grant) -> str:
    upstream = grant.upstream
    body = {
        "model": upstream.served_model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 3,
    }
    async with httpx.AsyncClient(base_url=upstream.base_url, timeout=30.0) as client:
        reply = await client.post("/v1/chat/completions", json=body)
    reply.raise_for_status()
    text: str = reply.json()["choices"][0]["message"]["content"]
    return text


async def test_two_models_share_a_budget_that_holds_one(two_models: InferConfig) -> None:
    async with door_over_two(two_models) as rig:
        door = rig.door
        assert {m.name: m.residency for m in door.models()} == {
            "alpha": Residency.NOT_LOADED,
            "beta": Residency.NOT_LOADED,
        }
        with trio.fail_after(BOUND_S):
            alpha = await door.acquire("alpha")
        assert (await _complete(alpha)).strip()
        alpha.done()
        view = door.residency()["alpha"]
        assert view.declared_bytes == DECLARED
        assert view.kv_bytes == 524_288
        logged = EngineBuffers()
        for line in rig.runtime.logs(rig.handles["alpha"], 500):
            logged = logged.add(line.text)
        assert logged.total(BufferKind.KV) == view.kv_bytes  # the server's own figure
        with trio.fail_after(10.0):  # the buffers it logged (3.0 MiB), then its RSS
            while (door.residency()["alpha"].measured_bytes or 0) < 5_000_000:  # noqa: ASYNC110
                await trio.sleep(0.2)
        measured = door.residency()["alpha"].measured_bytes
        assert measured is not None
        assert measured < BUDGET
        alpha_pid = rig.pid("alpha")
        assert alpha_pid is not None

        with trio.fail_after(BOUND_S):
            beta = await door.acquire("beta")  # alpha is idle: evicted
        assert (await _complete(beta)).strip()
        [evicted] = [e for e in rig.events if isinstance(e, ResidencyStop)]
        assert evicted.instance_id == rig.iid("alpha")
        assert evicted.reason is StopReason.EVICTED
        [alpha_exit] = [
            e
            for e in rig.events
            if isinstance(e, ProcessExited) and e.instance_id == rig.iid("alpha")
        ]
        assert alpha_exit.reason is StopReason.EVICTED  # the process's own exit says so
        alpha_status = rig.runtime.status(rig.handles["alpha"])
        assert alpha_status.stop_reason == "evicted"
        assert not psutil.pid_exists(alpha_pid) or psutil.Process(alpha_pid).status() == "zombie"

        got: list[Grant] = []

        async def want_alpha() -> None:
            got.append(await door.acquire("alpha"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(want_alpha)
            await trio.sleep(2.0)
            assert not got  # beta serves: it is never cut
            assert door.residency()["alpha"].queued == 1
            beta.done()
        [alpha_again] = got
        assert (await _complete(alpha_again)).strip()
        alpha_again.done()
        exits = [e for e in rig.events if isinstance(e, ProcessExited)]
        starts = [e for e in rig.events if isinstance(e, ProcessStarted)]
        beta_exit = next(e for e in exits if e.instance_id == rig.iid("beta"))
        alpha_restart = [e for e in starts if e.instance_id == rig.iid("alpha")][-1]
        assert beta_exit.at <= alpha_restart.at  # never both resident
    assert not any(
        p.info["name"] == "llama-server" and p.info["pid"] == alpha_restart.pid
        for p in psutil.process_iter(["name", "pid"])
    )
