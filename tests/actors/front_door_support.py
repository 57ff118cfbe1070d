"""A front door over managed instances on a `FakeFleet`, for MockClock tests.

`door_rig` loads one instance per role in one runtime (fake llama-servers on ports from
`FIRST_PORT`), gives each the same declared footprint, and opens the front door over them
with the fleet's fake memory gauge; the rig keeps every event (the runtime's and the
front door's) in order.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import attrs
import trio

from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs, Supervision
from inferactors._actors.front_door_members import door_member
from inferactors._actors.front_door_msgs import DoorSettings
from inferactors._actors.front_door_scheduler import FrontDoorScheduler, open_scheduler
from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._actors.serving import open_runtime
from inferactors._config.supervision import RestartPolicy
from inferactors._events import Event, instance_of
from inferactors._policy.residency import Bytes, Footprint
from inferactors._policy.scheduler_state import Limits, SlotRules
from inferactors.testing import FakeFleet, FakeMemory

E = TypeVar("E", bound=Event)

MiB = 1 << 20
FIRST_PORT = 18700
STOP_GRACE_S = 2.0
SUPERVISION = Supervision(restart=RestartPolicy(max_restarts=0), readiness_timeout_s=60.0)


@attrs.define(eq=False)
class Rig:
    """The runtime, the front door, the handles by role, the events, the fleet."""

    runtime: InferRuntime
    door: FrontDoorScheduler
    handles: dict[str, InstanceHandle]
    events: list[Event]
    fleet: FakeFleet
    memory: FakeMemory

    def of(self, kind: type[E], role: str | None = None) -> list[E]:
        """The events of ``kind`` (of the instance ``role``), in order."""
        iid = None if role is None else self.handles[role].instance_id
        return [
            e for e in self.events if isinstance(e, kind) and (iid is None or instance_of(e) == iid)
        ]

    def spawned(self, role: str) -> int:
        """How many processes were spawned for ``role``."""
        port = FIRST_PORT + list(self.handles).index(role)
        return sum(1 for child in self.fleet.children if child.port == port)

    def alive(self, role: str) -> bool:
        """Whether ``role``'s fake server runs."""
        port = FIRST_PORT + list(self.handles).index(role)
        return any(child.port == port for child in self.fleet.live)


def spec(role: str, index: int) -> InferenceSpec:
    return InferenceSpec(
        role=role,
        runtime=InferFlavor.LLAMACPP,
        model="tiny",
        serve=ServeArgs(port=FIRST_PORT + index),
    )


@contextlib.asynccontextmanager
async def door_rig(
    config: InferConfig,
    fleet: FakeFleet,
    roles: Sequence[str] = ("a", "b"),
    *,
    footprint_mib: int = 600,
    budget_mib: int = 1000,
    total_mib: float = 16384.0,
    rules: dict[str, SlotRules] | None = None,
    preload: tuple[str, ...] = (),
    supervision: Supervision = SUPERVISION,
    **limits: float,
) -> AsyncIterator[Rig]:
    """A front door over ``roles`` (on demand, idle TTL inf unless ``rules`` say) with
    ``limits`` (`Limits` fields) and a memory budget of ``budget_mib``; no restarts unless
    ``supervision`` says."""
    memory = fleet.memory(total_mib=total_mib)
    events: list[Event] = []
    async with open_runtime(config, node_id="door", edges=fleet.edges()) as runtime:
        stream = await runtime.subscribe(10_000)
        handles = {
            role: await runtime.load(spec(role, i), supervision) for i, role in enumerate(roles)
        }
        members = []
        for role, handle in handles.items():
            rule = (rules or {}).get(role) or SlotRules(
                name=role, on_demand=True, idle_ttl_s=math.inf
            )
            member = await door_member(runtime, handle, rule)
            members.append(attrs.evolve(member, footprint=Footprint(declared=footprint_mib * MiB)))
        settings = DoorSettings(
            limits=Limits(Bytes.of(budget_mib * MiB), **limits),  # type: ignore[arg-type]
            recovery_timeout_s=10.0,
            stop_grace_s=STOP_GRACE_S,
            preload=preload,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, stream, events)
            async with open_scheduler(
                members, settings, gauge=memory, on_event=events.append
            ) as door:
                yield Rig(runtime, door, handles, events, fleet, memory)
            nursery.cancel_scope.cancel()


async def _collect(stream: trio.MemoryReceiveChannel[Event], events: list[Event]) -> None:
    async for event in stream:
        events.append(event)
