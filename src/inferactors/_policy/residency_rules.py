"""From the run file's residency settings to the scheduler's rules and limits (pure).

`slot_rules` resolves each instance's `InstanceResidency`, its groups and its excludes into
the scheduler's `SlotRules`, with the names that route to it besides its role
(`aliases_of`: its registry model name and the server's ``--alias``, each kept only when no
other instance claims it); `limits_of` the queue bounds and the budget; `budget_bytes`
resolves ``budget = "auto"`` against the machine's memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .._config.allowlist import flag_positions
from .._config.config import ControlMode
from .._config.residency import AUTO, ResidencySection
from .._config.runfile import RunInstance
from .._config.spec import InferenceSpec
from .residency import Bytes, auto_budget
from .scheduler_state import Limits, SlotRules


def budget_bytes(section: ResidencySection, machine_total: int) -> int:
    """The memory budget: ``auto`` is the machine's total less ``reserve_bytes``."""
    if section.budget == AUTO or isinstance(section.budget, str):
        return auto_budget(machine_total, section.reserve_bytes)
    return section.budget


def limits_of(section: ResidencySection, machine_total: int) -> Limits:
    """The scheduler's bounds and budget for ``section`` on a machine of that memory."""
    budget = Bytes.of(budget_bytes(section, machine_total), section.accelerators)
    return Limits(
        budget=budget,
        max_queue=section.max_queue,
        max_queue_per_model=section.max_queue_per_model,
        max_wait_s=section.max_wait_s,
        drain_timeout_s=section.drain_timeout_s,
        retry_after_s=section.retry_after_s,
    )


def slot_rules(
    instances: Sequence[RunInstance], section: ResidencySection | None
) -> dict[str, SlotRules]:
    """Each instance's rules, by role, in the run file's order."""
    section = section or ResidencySection()
    claims = _alias_claims(instances)
    rules: dict[str, SlotRules] = {}
    for instance in instances:
        role, setting = instance.spec.role, instance.residency
        groups = [g for g in section.groups if role in g.members]
        swap = next((g.name for g in groups if g.swap), None)
        ttl = section.idle_ttl_s if setting.idle_ttl_s is None else setting.idle_ttl_s
        adopted = instance.mode is ControlMode.ADOPTED
        rules[role] = SlotRules(
            name=role,
            aliases=tuple(a for a in aliases_of(instance.spec) if claims[a] == 1),
            on_demand=setting.on_demand and not adopted,
            idle_ttl_s=ttl if setting.on_demand else math.inf,
            concurrency_limit=setting.concurrency_limit,
            groups=frozenset(g.name for g in groups),
            persistent_groups=frozenset(g.name for g in groups if g.persistent),
            swap_group=swap,
            excludes=frozenset(instance.spec.excludes),
            adopted=adopted,
        )
    return rules


def aliases_of(spec: InferenceSpec) -> tuple[str, ...]:
    """Names besides the role that a request may give for ``spec``'s instance: its
    registry model name and the ``--alias`` values of its llama-server."""
    names: list[str] = []
    if spec.model is not None and spec.model != spec.role:
        names.append(spec.model)
    args = spec.serve.extra_args
    for index, flag in flag_positions(spec.runtime, args):
        if flag in ("-a", "--alias") and index + 1 < len(args):
            names += [a for a in args[index + 1].split(",") if a and a != spec.role]
    return tuple(dict.fromkeys(names))


def _alias_claims(instances: Sequence[RunInstance]) -> dict[str, int]:
    """How many instances claim each name (an alias that is another's role counts too)."""
    roles = {instance.spec.role for instance in instances}
    claims: dict[str, int] = {}
    for instance in instances:
        for alias in aliases_of(instance.spec):
            claims[alias] = claims.get(alias, 0) + 1 + (alias in roles)
    return claims
