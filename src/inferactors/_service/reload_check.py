"""A reload's dry admission: `check_loading`, before anything changes.

Every instance a reload would load (added, changed, revived) is admitted with its new
settings as far as that can be done without starting it: `make_plan` with ``dry`` (its
typed fields and supervision, the registry's models and their pins, the serve program's
flags against its ``--help``, the API key file, ``run_as``). Left out, since only the
start can tell: whether its port is free (the server it replaces may hold it), and
whether an adopted server or the Ollama daemon answers. Those are found at the start and
reported in `ReloadResult.refused`; so is a model refused as tampered (a changed byte, a
signature the anchors no longer verify): tampering is not a configuration error, and it
refuses its own instance at its load, not the whole reload.

Models resolve in the registry of an open runtime reading the same registry file (its
pins were checked already: a stat each), else in one opened for the check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

import trio

from .._actors.admission import make_plan
from .._actors.registry_open import trust_anchors
from .._config.config import InferConfig
from .._edges.bundle import Edges
from .._errors import InferactorsError, InvalidConfig, PinMismatch, one_line
from .._models.registry import ModelRegistry
from .._policy.admission import resolve_supervision
from .._policy.reload_plan import Placement
from .hosts import RuntimeHost


async def check_loading(
    run_file: Path,
    loading: Mapping[str, Placement],
    hosts: Iterable[RuntimeHost],
    edges: Edges,
) -> None:
    """Admit every placement of ``loading`` dry (module docstring), concurrently.

    Raises:
        InvalidConfig: ``"RUN_FILE: instance NAME: model tinyy: no registered model
            'tinyy'"``, naming every instance refused (sorted) and why.
    """
    registries = [host.runtime.registry for host in hosts]
    failures: dict[str, str] = {}

    async def check(name: str, placement: Placement) -> None:
        try:
            await _dry_admit(placement, registries, edges)
        except PinMismatch:
            pass  # tampering, not configuration: refused at its own load, alone
        except InferactorsError as error:
            failures[name] = one_line(str(error))

    async with trio.open_nursery() as nursery:
        for name, placement in loading.items():
            nursery.start_soon(check, name, placement)
    if failures:
        listed = "; ".join(f"instance {name}: {why}" for name, why in sorted(failures.items()))
        raise InvalidConfig(f"{run_file}: {listed}")


async def _dry_admit(
    placement: Placement, registries: list[ModelRegistry | None], edges: Edges
) -> None:
    entry, config = placement.entry, placement.runtime
    resolve_supervision(entry.supervision, config)
    registry = await _registry_for(config, registries)
    await make_plan(
        entry.spec, config, registry=registry, edges=edges, instance_dir=Path("."), dry=True
    )


async def _registry_for(
    config: InferConfig, registries: list[ModelRegistry | None]
) -> ModelRegistry | None:
    if config.managed is None:
        return None
    path = config.managed.registry
    anchors = await trio.to_thread.run_sync(trust_anchors, config.managed)
    for registry in registries:
        if registry is not None and registry.path == path and registry.anchors == anchors:
            return registry
    fresh = await trio.to_thread.run_sync(partial(ModelRegistry.open, path, anchors=anchors))
    registries.append(fresh)  # the other checks of this reload share it
    return fresh
