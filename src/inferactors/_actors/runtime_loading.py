"""`InferRuntime`'s loads, a mixin: `RuntimeLoading` (`admit`, `load`, `adopt`).

A load plans its spec with the instance's one-flavor config (`InferConfig.for_instance`;
the admission may probe, and at most ``runtime.PROBING`` run at once), makes its
instance directory (managed), builds its actor (the instance actor, or the Ollama actor
for a managed Ollama model) and installs it with the supervisor (`Load`). Concurrent
loads of one spec make and install its directory one after the other. Durations are
float seconds.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import trio

from .._config.config import ControlMode, InferConfig
from .._config.convert import checked_spec
from .._config.ids import instance_id
from .._config.spec import InferenceSpec
from .._config.supervision import Supervision
from .._edges.bundle import Edges
from .._errors import BackendError, InferactorsError, InvalidState, Unsupported
from .._events import Event
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from .._policy.admission import Admission, Plan, resolve_supervision
from .._policy.probe_schedule import probe_phase
from .admission import make_plan
from .instance import InstanceActor
from .messages import Load, call
from .ollama import OllamaActor
from .runtime_status import InstanceHandle, id_of
from .status_board import StatusSlot


class RuntimeLoading:
    """The loads of `InferRuntime` (which provides the attributes and properties declared
    here)."""

    config: InferConfig
    node_id: str
    registry: ModelRegistry | None
    _supervisor: trio.MemorySendChannel[object]
    _events: trio.MemorySendChannel[Event]
    _edges: Edges
    _probing: trio.CapacityLimiter
    _install_locks: dict[str, tuple[trio.Lock, int]]
    _installed: int

    @property
    def id(self) -> str:
        raise NotImplementedError  # `InferRuntime.id`

    @property
    def control_mode(self) -> ControlMode:
        raise NotImplementedError  # `InferRuntime.control_mode`

    async def admit(self, spec: InferenceSpec, *, mode: ControlMode | None = None) -> Admission:
        """Check that ``spec`` could run here in ``mode`` (default `control_mode`),
        read-only (GETs and TCP connects only).

        Raises:
            InvalidConfig: the spec is malformed.
            AdmissionRefused: it cannot run here; the message says why.
            NoVerdict: an adopted server (or the Ollama daemon) could not be judged now:
                our own loop ran late (nothing is known; load again later).
        """
        spec = checked_spec(spec)
        config = self._config_for(spec, mode)
        plan = await self._plan(spec, config, self._instance_dir("plan", config))
        return Admission(runtime=self.id, arch=platform.machine(), notes=plan.notes)

    async def load(
        self,
        spec: InferenceSpec,
        supervision: Supervision | None = None,
        *,
        mode: ControlMode | None = None,
    ) -> InstanceHandle:
        """Plan ``spec``, create its instance directory (managed) and its actor.

        ``supervision`` sets this instance's restart policy, readiness deadline and
        deep-health watchdog; unset fields come from the runtime's `ManagedConfig`.
        ``mode`` (default `control_mode`) says whether inferactors starts its server or
        adopts one already running; a one-flavor runtime takes its own mode only. The
        instance is Loaded; nothing is started. An adopted or Ollama spec is admitted by one
        probe of its server, bounded as a whole by ``config.probe_timeout_s``. Raises what
        `admit` raises, plus `InvalidState` for an id already loaded or an ip:port a managed
        instance uses, and `BackendError` when the instance directory cannot be made.
        """
        spec = checked_spec(spec)  # before the id is derived from its fields
        config = self._config_for(spec, mode)
        iid = instance_id(spec, config.mode, self.node_id)
        directory = self._instance_dir(iid, config)
        plan = await self._plan(spec, config, directory)  # loads run concurrently
        plan = attrs.evolve(plan, supervision=resolve_supervision(supervision, config))
        async with self._installing(iid):  # one load of an id at a time from here
            created = directory is not None and not directory.exists()
            if directory is not None:
                await _make_dir(directory)
            try:
                await self._install(iid, plan, directory, config)
            except InferactorsError:
                if created and directory is not None:  # refused: leave no trace behind
                    await trio.to_thread.run_sync(shutil.rmtree, directory, True)
                raise
        self._require_signed(plan)
        return InstanceHandle(self.id, iid, spec.role)

    @contextlib.asynccontextmanager
    async def _installing(self, iid: str) -> AsyncIterator[None]:
        """Hold the load lock of ``iid``: concurrent loads of one spec make and install its
        directory one after the other, so a refused one never removes the directory the
        winner installed, and none sees it half made ("File exists")."""
        lock, users = self._install_locks.get(iid, (trio.Lock(), 0))
        self._install_locks[iid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._install_locks[iid]
            if users == 1:
                del self._install_locks[iid]
            else:
                self._install_locks[iid] = (lock, users - 1)

    def _require_signed(self, plan: Plan) -> None:
        """Record the spec's ``signed_by`` for every model its server reads, so each later
        spawn's pin check requires it too (``_models/signing_rules.py``)."""
        if not plan.spec.signed_by or self.registry is None:
            return
        models = (plan.model, plan.draft, plan.mmproj, *plan.lora)
        for model in models:
            if model is not None:
                self.registry.require_signed(model.name, plan.spec.signed_by)

    async def adopt(self, handle: InstanceHandle, spec: InferenceSpec) -> InstanceHandle:
        """Re-register an adopted server under ``handle``'s id.

        Raises:
            Unsupported: in a managed one-flavor runtime, where a lost process cannot be
                recovered.
        """
        if self.config.flavor is not None and self.control_mode is ControlMode.MANAGED:
            raise Unsupported(
                f"{self.id} cannot re-adopt {id_of(handle)}: "
                "a managed server's process is not recoverable"
            )
        spec = checked_spec(spec)
        config = self._config_for(spec, ControlMode.ADOPTED)
        plan = await self._plan(spec, config, None)
        try:
            await self._install(id_of(handle), plan, None, config)
        except InvalidState:
            pass  # already registered under that id: nothing to do
        return InstanceHandle(self.id, id_of(handle), spec.role)

    def _config_for(self, spec: InferenceSpec, mode: ControlMode | None) -> InferConfig:
        """The one-flavor config ``spec`` is planned and run with in ``mode`` (default:
        `control_mode`); raises `AdmissionRefused` as `InferConfig.for_instance`."""
        return self.config.for_instance(spec.runtime, mode or self.control_mode)

    async def _plan(self, spec: InferenceSpec, config: InferConfig, directory: Path | None) -> Plan:
        """Admit ``spec`` with its one-flavor ``config``: at most `PROBING` admissions
        (each may probe) at once, whoever asks (`admit`, `load`, `adopt`)."""
        async with self._probing:
            return await make_plan(
                spec,
                config,
                registry=self.registry,
                edges=self._edges,
                instance_dir=directory or Path("."),
            )

    async def _install(
        self, iid: str, plan: Plan, directory: Path | None, config: InferConfig
    ) -> None:
        actor: InstanceActor | OllamaActor
        slot = StatusSlot(role=plan.spec.role, mode=plan.mode)
        if plan.mode is ControlMode.MANAGED and plan.spec.runtime is InferFlavor.OLLAMA:
            actor = OllamaActor.create(
                instance_id=iid,
                runtime_id=config.adapter_id,
                plan=plan,
                config=config,
                instance_dir=directory,
                events=self._events,
                slot=slot,
                on_probe=self._edges.on_probe,
            )
        else:
            actor = InstanceActor.create(
                instance_id=iid,
                runtime_id=config.adapter_id,
                plan=plan,
                config=config,
                instance_dir=directory,
                edges=self._edges,
                events=self._events,
                registry=self.registry,
                slot=slot,
                tick_phase=probe_phase(self._installed),
            )
            self._installed += 1
        await call(self._supervisor, partial(Load, actor, slot=slot))

    def _instance_dir(self, iid: str, config: InferConfig) -> Path | None:
        managed = config.managed
        return None if managed is None else managed.data_root / iid


async def _make_dir(directory: Path) -> None:
    try:
        await trio.to_thread.run_sync(lambda: directory.mkdir(parents=True, exist_ok=True))
    except OSError as error:
        raise BackendError(f"cannot create the instance directory {directory}: {error}") from error
