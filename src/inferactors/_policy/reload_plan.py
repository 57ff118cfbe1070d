"""What a reload does to each instance (pure): `plan_reload`.

An instance is named by its ``role`` in the run file. Each one's `Placement` is its run-file
entry (mode, spec, supervision) together with the settings of the runtime it is built in:
that runtime's `InferConfig` (the ``[managed]`` section as it applies to the flavor, the
probe and deep-health timeouts) and the ``node_id``. The rule is the simplest honest one:

- a name only in the new file is **added** (loaded and started);
- a name only in the old file is **removed** (stopped and unloaded);
- a name in both whose placement differs in any way is **changed** (unloaded, loaded
  again with the new settings, started): so a change to ``[managed]`` (registry,
  data_root, serve_programs, run_as, restart, ...) or to ``node_id`` changes every
  instance of the runtimes built from it;
- a name in both with the same placement is **unchanged** (its server keeps running, same
  pid), unless it is held down (stopped for exposure or a tampered model, a
  configuration error, given up, refused at load): then it is **revived** (loaded again
  and started), since a reload is the only way back for those.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import attrs

from .._config.config import ControlMode, InferConfig
from .._config.runfile import RunConfig, RunInstance
from .._flavor import InferFlavor


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
    same = {name for name in both if old[name] == new[name]}
    return ReloadPlan(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(both - same)),
        unchanged=tuple(sorted(same - held)),
        revived=tuple(sorted(same & held)),
    )
