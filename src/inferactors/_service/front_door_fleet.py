"""The scheduler ``inferactors run`` gives its front door today: every instance of the run
file, always resident, granted while it is Running.

`FleetScheduler` reads the fleet's members at each call (so a reload's added and removed
instances show at once) and hands each request to the instance's own address. It starts
and stops nothing: ``run`` starts every instance, and a request for one that is not Running
is refused with 503 and ``Retry-After``. The scheduler with on-demand starts, idle TTL and
eviction takes its place through the same seam (``_actors/front_door_seam.py``).

Names: a model is its role, and its aliases are the spec's ``model`` (the registry name,
or the Ollama tag) when it differs; Ollama readings of either route too
(`inferactors._actors.front_door_names`). The server gets, as ``model``: an Ollama
instance its tag; llama-server and mlx_lm.server none (each serves the one model it
loaded, and mlx_lm.server would try to load any other name it is sent). A server started
with ``serve.api_key_file`` gets its key as the bearer token, read once per instance the
way admission reads it.
"""

from __future__ import annotations

import os
from typing import Protocol

import attrs
import trio

from .._actors.admission_extras import read_api_key
from .._actors.front_door_names import find_model, unknown_model
from .._actors.front_door_resident import NOT_READY_RETRY_S
from .._actors.front_door_seam import Grant, ModelEntry, Residency, Upstream
from .._config.binding import spec_host
from .._config.spec import InferenceSpec
from .._edges.containment import resolve_run_as
from .._errors import AdmissionRefused, FrontDoorRefused, InvalidConfig, RefusalKind
from .._flavor import InferFlavor
from .._status import InstanceState, InstanceStatus
from .members import Member


class Members(Protocol):
    """What the scheduler reads of a `Fleet`."""

    members: dict[str, Member]


def upstream_of(spec: InferenceSpec) -> Upstream:
    """Where requests for the instance of ``spec`` go (module docstring)."""
    host = spec_host(spec)
    host = "127.0.0.1" if host == "localhost" else host
    shown = f"[{host}]" if ":" in host else host
    served = spec.model or "" if spec.runtime is InferFlavor.OLLAMA else ""
    return Upstream(spec.role, spec.runtime, f"http://{shown}:{spec.port()}", served)


def residency_of(status: InstanceStatus) -> Residency:
    """Where an instance with ``status`` stands: Running or Degraded (it serves) is
    resident; Loaded with a live process is starting; the rest is not loaded."""
    if status.state in (InstanceState.RUNNING, InstanceState.DEGRADED):
        return Residency.RESIDENT
    if status.state is InstanceState.LOADED and status.pid is not None:
        return Residency.STARTING
    return Residency.NOT_LOADED


def entry_of(spec: InferenceSpec, status: InstanceStatus) -> ModelEntry:
    """The model entry of the instance of ``spec`` with ``status``."""
    aliases = () if spec.model in (None, spec.role) else (str(spec.model),)
    return ModelEntry(spec.role, aliases, spec.runtime, residency_of(status), on_demand=False)


class FleetScheduler:
    """A `front_door_seam.Scheduler` over a fleet's members (module docstring)."""

    def __init__(self, fleet: Members) -> None:
        self.fleet = fleet
        self._keys: dict[tuple[str, str | None], str] = {}

    def models(self) -> tuple[ModelEntry, ...]:
        """Every instance of the run file, in its order, where it stands now; no I/O."""
        return tuple(
            entry_of(member.placement.entry.spec, member.status)
            for member in self.fleet.members.values()
        )

    async def acquire(self, model: str) -> Grant:
        """A grant for ``model`` while its instance is Running (or Degraded: it serves).

        Raises:
            FrontDoorRefused: an unknown model (404), or one whose instance is not running
                (503, ``Retry-After``).
        """
        await trio.lowlevel.checkpoint()
        entries = self.models()
        entry = find_model(entries, model)
        if entry is None:
            raise unknown_model(entries, model)
        member = self.fleet.members[entry.name]
        if entry.residency is not Residency.RESIDENT:
            state = member.status.state.value
            raise FrontDoorRefused(
                f"model {entry.name!r} is not ready: its instance is {state}",
                kind=RefusalKind.START_FAILED,
                status=503,
                model=model,
                retry_after_s=NOT_READY_RETRY_S,
            )
        upstream = upstream_of(member.placement.entry.spec)
        key = await self._api_key(member, model)
        return _FleetGrant(upstream if key is None else attrs.evolve(upstream, api_key=key))

    async def _api_key(self, member: Member, model: str) -> str | None:
        """The server's API key (``serve.api_key_file``), read once per instance as its
        admission reads it (owned by its ``run_as`` user, or us), None without one.

        Raises:
            FrontDoorRefused: the key file cannot be read now (502, naming the file).
        """
        path = member.placement.entry.spec.serve.api_key_file
        if path is None:
            return None
        instance = member.handle.instance_id if member.handle is not None else None
        cached = self._keys.get((member.name, instance))
        if cached is not None:
            return cached
        managed = member.placement.runtime.managed
        try:
            run_as = resolve_run_as(managed.run_as) if managed and managed.run_as else None
            key = await read_api_key(path, run_as=run_as, euid=os.geteuid())
        except (AdmissionRefused, InvalidConfig) as error:
            raise FrontDoorRefused(
                f"model {member.name!r}: {error}",
                kind=RefusalKind.START_FAILED,
                status=502,
                model=model,
            ) from None
        self._keys[(member.name, instance)] = key
        return key


class _FleetGrant:
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def done(self) -> None:
        """Nothing to count: every instance is always resident."""
