"""Building what `open_scheduler` takes: a `DoorMember` for each loaded instance (its
rules, its upstream, its declared and estimated figures) and the `DoorSettings` of a run's
``[residency]`` table on this machine."""

from __future__ import annotations

from collections.abc import Sequence

from .._config.config import ControlMode
from .._config.residency import InstanceResidency, ResidencySection, check_residency
from .._config.runfile import RunInstance
from .._edges.memory_gauge import MemoryGauge
from .._flavor import InferFlavor
from .._policy.residency_rules import limits_of, slot_rules
from .._policy.scheduler_state import SlotRules
from .footprints import footprint_of
from .front_door_msgs import DoorMember, DoorSettings
from .front_door_seam import Upstream
from .runtime import InferRuntime
from .runtime_status import InstanceHandle

Placed = tuple[InferRuntime, InstanceHandle, InstanceResidency]
"""A loaded instance: its runtime, its handle, and its residency settings."""


async def door_members(
    placed: Sequence[Placed], section: ResidencySection | None = None
) -> tuple[DoorMember, ...]:
    """The members of a front door over the loaded instances ``placed`` (in order), with
    the groups, TTL default and names of ``section``; each as `door_member`.

    Raises:
        UnknownInstance: an instance is not loaded.
        InvalidConfig: the residency settings break a rule (`check_residency`).
    """
    instances = [
        RunInstance(runtime.mode_of(handle), await runtime.spec_of(handle), residency=setting)
        for runtime, handle, setting in placed
    ]
    check_residency(
        section,
        [i.spec.role for i in instances],
        [i.residency for i in instances],
        [i.mode is ControlMode.ADOPTED for i in instances],
    )
    rules = slot_rules(instances, section)
    return tuple(
        [
            await door_member(runtime, handle, rules[instance.spec.role], setting)
            for (runtime, handle, setting), instance in zip(placed, instances, strict=True)
        ]
    )


async def door_member(
    runtime: InferRuntime,
    handle: InstanceHandle,
    rules: SlotRules,
    setting: InstanceResidency = InstanceResidency(),  # noqa: B008  (frozen value)
) -> DoorMember:
    """The front door's view of the loaded instance ``handle``: where its requests go
    (its base URL; as ``model``, an Ollama instance its tag and the others none: each of
    them serves the one model it loaded, and mlx_lm.server would try to load any other
    name; its API key) and its footprint (registry shards, the KV cache from the GGUF
    header, estimates; file reads run in a thread).

    Raises:
        UnknownInstance: the instance is not loaded.
    """
    spec = await runtime.spec_of(handle)
    served = ""
    if spec.runtime is InferFlavor.OLLAMA:
        served = await runtime.served_model(handle) or spec.model or ""
    upstream = Upstream(
        role=spec.role,
        flavor=spec.runtime,
        base_url=spec.base_url(),
        served_model=served,
        api_key=await runtime.api_key(handle),
    )
    figures = await footprint_of(spec, runtime.registry, setting)
    return DoorMember(rules, runtime, handle, upstream, figures.footprint, figures.notes)


async def door_settings(
    section: ResidencySection | None,
    gauge: MemoryGauge,
    stop_grace_s: float,
) -> DoorSettings:
    """The settings of ``section`` (the defaults when None) on this machine: an ``auto``
    budget is measured now, as the machine's total memory less the reserve."""
    section = section or ResidencySection()
    machine = await gauge.machine()
    return DoorSettings(
        limits=limits_of(section, machine.total),
        recovery_timeout_s=section.recovery_timeout_s,
        stop_grace_s=stop_grace_s,
        preload=section.preload,
    )
