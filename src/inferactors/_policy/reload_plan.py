"""What a reload does to each instance (pure): `plan_reload`.

An instance is named by its ``role`` in the run file. Each one's `Placement` is its run-file
entry (mode, spec, supervision) together with the settings of the runtime it is built in:
that runtime's `InferConfig` (the ``[managed]`` section as it applies to the flavor, the
probe and deep-health timeouts) and the ``node_id``. What decides whether its process goes
on is its **effective settings** (`Effective`): its mode and spec, the ``node_id``, its
supervision with the runtime's defaults filled in, the probe timeouts, and of ``[managed]``
only what reaches its process (the registry, the data root, its own flavor's serve program,
the environment, ``run_as``, and ``keep_alive`` for an Ollama model alone). So:

- a name only in the new file is **added** (loaded and started);
- a name only in the old file is **removed** (stopped and unloaded);
- a name in both whose effective settings differ is **changed** (unloaded, loaded again
  with the new settings, started): a ``[managed]`` default (``restart``,
  ``readiness_timeout_s``) changes the instances that take it, not those whose own
  ``supervision`` sets it; another flavor's serve program, ``keep_alive`` for a llama-server,
  ``[managed.logs]`` (applied to every ring as it is) or the trust anchors (never passed to
  a server: every reload re-reads them for the registries, ``_service/reload_anchors.py``)
  change nothing;
- a name in both with the same effective settings is **unchanged** (its server keeps
  running, same pid, even when the runtime it runs in was built from other settings),
  unless it is held down (stopped for exposure or a tampered model, a configuration
  error, given up, refused at load): then it is **revived** (loaded again and started),
  since a reload is the only way back for those.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import attrs

from .._config.config import ControlMode, InferConfig, ManagedConfig
from .._config.runfile import RunConfig, RunInstance
from .._config.server_logs import ServerLogs
from .._config.spec import InferenceSpec
from .._config.supervision import RestartPolicy, Supervision
from .._flavor import InferFlavor
from .admission import resolve_supervision


@attrs.frozen
class Placement:
    """One instance as a run file places it: its entry and its runtime's settings."""

    entry: RunInstance
    runtime: InferConfig
    node_id: str

    @property
    def runtime_key(self) -> tuple[InferFlavor, ControlMode]:
        """The (flavor, mode) of the runtime that runs it: one runtime per pair."""
        return (self.entry.spec.runtime, self.entry.mode)

    @property
    def effective(self) -> Effective:
        """Its effective settings (module docstring)."""
        runtime = self.runtime
        return Effective(
            mode=self.entry.mode,
            spec=self.entry.spec,
            node_id=self.node_id,
            supervision=resolve_supervision(self.entry.supervision, runtime),
            probe_timeout_s=runtime.probe_timeout_s,
            deep_timeout_s=runtime.deep_timeout_s,
            probe_port=runtime.probe_port,
            allowed_ports=runtime.allowed_ports,
            managed=_process_settings(runtime.managed, self.entry.spec),
        )


@attrs.frozen
class Effective:
    """What decides whether an instance's process goes on across a reload: equal values,
    same process (module docstring). ``managed`` holds only what reaches the process: its
    supervision defaults live in ``supervision``, ``keep_alive`` only for Ollama, and the
    output settings not at all."""

    mode: ControlMode
    spec: InferenceSpec
    node_id: str
    supervision: Supervision
    probe_timeout_s: float
    deep_timeout_s: float
    probe_port: int | None
    allowed_ports: tuple[int, int] | None
    managed: ManagedConfig | None


def _process_settings(managed: ManagedConfig | None, spec: InferenceSpec) -> ManagedConfig | None:
    if managed is None:
        return None
    defaults = ManagedConfig(managed.registry, managed.data_root)
    keep_alive = managed.keep_alive if spec.runtime is InferFlavor.OLLAMA else defaults.keep_alive
    return attrs.evolve(
        managed,
        restart=RestartPolicy(),
        readiness_timeout_s=defaults.readiness_timeout_s,
        keep_alive=keep_alive,
        logs=ServerLogs(),
        trust_anchors=(),
    )


def placements(config: RunConfig) -> dict[str, Placement]:
    """Every instance of a validated run file, by name (its role), in file order.

    Raises:
        InvalidConfig: a managed instance without a ``[managed]`` section, or runtime
            settings that are malformed (`RunConfig.infer_config`).
    """
    return {
        entry.spec.role: Placement(
            entry, config.infer_config(entry.spec.runtime, entry.mode), config.node_id
        )
        for entry in config.instances
    }


@attrs.frozen
class ReloadPlan:
    """The names in each class (module docstring), each tuple sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    revived: tuple[str, ...] = ()

    @property
    def to_unload(self) -> tuple[str, ...]:
        """Names whose current instance goes: removed, changed and revived."""
        return tuple(sorted((*self.removed, *self.changed, *self.revived)))

    @property
    def to_load(self) -> tuple[str, ...]:
        """Names loaded and started from the new file: added, changed and revived."""
        return tuple(sorted((*self.added, *self.changed, *self.revived)))


def plan_reload(
    old: Mapping[str, Placement], new: Mapping[str, Placement], held: Set[str] = frozenset()
) -> ReloadPlan:
    """Compare the running placements ``old`` with the new file's ``new``; ``held`` names
    the instances held down now (only a reload brings them back)."""
    both = old.keys() & new.keys()
    same = {name for name in both if old[name].effective == new[name].effective}
    return ReloadPlan(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(both - same)),
        unchanged=tuple(sorted(same - held)),
        revived=tuple(sorted(same & held)),
    )
