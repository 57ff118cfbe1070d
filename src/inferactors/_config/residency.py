"""Residency settings: which instances run on demand, for how long they stay idle, how much
memory the models may hold, and how long a request may wait (pure values; no I/O).

The run file's ``[residency]`` table (`ResidencySection`) sets the run-level figures:
the memory budget (``"auto"``: the machine's memory less ``reserve_bytes``; or bytes),
accelerator budgets the operator declares, the queue bounds, the preload list and the
groups. Each ``[[instances]]`` entry may carry an ``[instances.residency]`` table
(`InstanceResidency`): on demand or always on, its idle TTL, its concurrency limit, its
accelerator use and its estimate beyond the declared figure. Every check names the field,
``$.residency.groups[0].members[1]``. Durations are float seconds; sizes are bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from .._errors import InvalidConfig, shown
from .spec import MAX_MEMORY_BYTES, valid_token

GiB = 1 << 30

AUTO = "auto"
"""``budget = "auto"``: the machine's total memory less ``reserve_bytes``."""

DEFAULT_RESERVE_BYTES = 2 * GiB
"""Memory an ``auto`` budget leaves to the system and other programs."""
DEFAULT_IDLE_TTL_S = 300.0
"""An on-demand instance idle this long is stopped (Ollama's default keep_alive, 5 min)."""
DEFAULT_MAX_QUEUE = 64
"""Requests that may wait at once, all models together."""
DEFAULT_MAX_QUEUE_PER_MODEL = 16
"""Requests that may wait at once for one model."""
DEFAULT_MAX_WAIT_S = 120.0
"""The longest one request waits for its model (a cold start, an eviction, busy peers)."""
DEFAULT_DRAIN_TIMEOUT_S = 30.0
"""How long a stop waits for the requests in flight before it stops the server anyway."""
DEFAULT_RECOVERY_TIMEOUT_S = 10.0
"""After an eviction, how long a start waits for the machine's free memory to cover it."""
DEFAULT_RETRY_AFTER_S = 1.0
"""The ``Retry-After`` a full queue or a timed-out wait tells the client."""


@attrs.frozen
class ResidencyGroup:
    """A set of instances with a residency rule, as llama-swap's groups.

    Attributes:
        name: a plain token naming the group.
        members: the roles of its instances.
        swap: at most one member is resident at a time; starting one stops the other.
        persistent: no instance outside the group ever evicts a member (a member of the
            same swap group still swaps it out).
    """

    name: str
    members: tuple[str, ...]
    swap: bool = False
    persistent: bool = False


@attrs.frozen
class ResidencySection:
    """The run file's ``[residency]`` table (module docstring).

    Attributes:
        budget: ``"auto"`` or the bytes every resident model may hold together.
        reserve_bytes: what an ``auto`` budget leaves to the system and other programs.
        accelerators: operator-declared budgets by device name (``{gpu0 = 25769803776}``),
            bytes; an instance declares its use of each in its own ``accelerators``.
        max_queue: requests that may wait at once, all models together.
        max_queue_per_model: requests that may wait at once for one model.
        max_wait_s: the longest one request waits.
        drain_timeout_s: how long a stop waits for requests in flight.
        recovery_timeout_s: after an eviction, how long a start waits for free memory.
        retry_after_s: the ``Retry-After`` of a full queue or a timed-out wait.
        idle_ttl_s: the idle TTL of an on-demand instance that sets none (``inf``: never).
        preload: on-demand instances started by ``run`` (they then idle out as others).
        groups: swap and persistent groups.
    """

    budget: str | int = AUTO
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    accelerators: tuple[tuple[str, int], ...] = ()
    max_queue: int = DEFAULT_MAX_QUEUE
    max_queue_per_model: int = DEFAULT_MAX_QUEUE_PER_MODEL
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    recovery_timeout_s: float = DEFAULT_RECOVERY_TIMEOUT_S
    retry_after_s: float = DEFAULT_RETRY_AFTER_S
    idle_ttl_s: float = DEFAULT_IDLE_TTL_S
    preload: tuple[str, ...] = ()
    groups: tuple[ResidencyGroup, ...] = ()

    def validate(self, field: str = "$.residency") -> None:
        """Check the figures alone (the roles are checked against the instances by
        `check_residency`).

        Raises:
            InvalidConfig: the first bad value, naming its field.
        """
        if isinstance(self.budget, str) and self.budget != AUTO:
            raise InvalidConfig(
                f'{field}.budget must be "auto" or a number of bytes, got {shown(self.budget)}'
            )
        if isinstance(self.budget, int):
            _check_bytes(f"{field}.budget", self.budget, positive=True)
        _check_bytes(f"{field}.reserve_bytes", self.reserve_bytes)
        for name, size in self.accelerators:
            _check_name(f"{field}.accelerators", name)
            _check_bytes(f"{field}.accelerators.{name}", size, positive=True)
        _check_count(f"{field}.max_queue", self.max_queue, 0)
        _check_count(f"{field}.max_queue_per_model", self.max_queue_per_model, 0)
        _check_seconds(f"{field}.max_wait_s", self.max_wait_s)
        _check_seconds(f"{field}.drain_timeout_s", self.drain_timeout_s)
        _check_seconds(f"{field}.recovery_timeout_s", self.recovery_timeout_s)
        _check_seconds(f"{field}.retry_after_s", self.retry_after_s)
        _check_ttl(f"{field}.idle_ttl_s", self.idle_ttl_s)
        for index, group in enumerate(self.groups):
            _check_name(f"{field}.groups[{index}].name", group.name)

    @property
    def accelerator_names(self) -> tuple[str, ...]:
        """The declared devices, in the run file's order."""
        return tuple(name for name, _ in self.accelerators)


@attrs.frozen
class InstanceResidency:
    """One instance's ``[instances.residency]`` table.

    Attributes:
        on_demand: not started by ``run``; the first request for it starts it, and it is
            stopped when idle for ``idle_ttl_s`` or evicted to make room. False: always on,
            started by ``run``, never evicted, never stopped for idleness.
        idle_ttl_s: seconds without a request in flight or waiting before an on-demand
            instance is stopped (None: the run's ``idle_ttl_s``; ``inf``: never).
        concurrency_limit: requests in flight and waiting for it at once; one more is
            refused with 429 (None: no limit beyond the queue bounds).
        estimated_bytes: memory beyond the declared figure (weights and KV cache) that the
            operator knows it takes: compute buffers, a projector, a draft model (None: our
            own estimate).
        accelerators: its use of each declared device, bytes (``{gpu0 = 8589934592}``).
    """

    on_demand: bool = False
    idle_ttl_s: float | None = None
    concurrency_limit: int | None = None
    estimated_bytes: int | None = None
    accelerators: tuple[tuple[str, int], ...] = ()

    def validate(self, field: str) -> None:
        """Raise `InvalidConfig` naming ``field.<name>`` for a bad value."""
        if self.idle_ttl_s is not None:
            _check_ttl(f"{field}.idle_ttl_s", self.idle_ttl_s)
        if self.concurrency_limit is not None:
            _check_count(f"{field}.concurrency_limit", self.concurrency_limit, 1)
        if self.estimated_bytes is not None:
            _check_bytes(f"{field}.estimated_bytes", self.estimated_bytes)
        for name, size in self.accelerators:
            _check_name(f"{field}.accelerators", name)
            _check_bytes(f"{field}.accelerators.{name}", size)


def check_residency(
    section: ResidencySection | None,
    roles: Sequence[str],
    settings: Sequence[InstanceResidency],
    adopted: Sequence[bool],
) -> None:
    """Check the residency settings against the instances (``roles``, their settings and
    whether each is adopted, in run-file order).

    Rules: every preloaded role and group member names an instance; a preloaded instance
    is on demand (an always-on one starts anyway); an instance is in at most one swap
    group, whose members are all on demand (an always-on member could never be swapped
    out); two members of one swap group are not both preloaded; an adopted instance is
    never on demand (inferactors does not start it); every device an instance uses is
    declared in ``$.residency.accelerators``.

    Raises:
        InvalidConfig: naming the field, e.g. ``$.residency.preload[1]: 'x' is not an
            instance's role``.
    """
    section = section or ResidencySection()
    section.validate()
    index = {role: i for i, role in enumerate(roles)}
    devices = set(section.accelerator_names)
    for i, (role, setting, is_adopted) in enumerate(zip(roles, settings, adopted, strict=True)):
        field = f"$.instances[{i}].residency"
        setting.validate(field)
        if is_adopted and setting.on_demand:
            raise InvalidConfig(
                f"{field}.on_demand: {shown(role)} is adopted: inferactors never starts an "
                "adopted server, so it cannot run on demand"
            )
        for name, _ in setting.accelerators:
            if name not in devices:
                raise InvalidConfig(
                    f"{field}.accelerators.{name}: no such device in $.residency.accelerators"
                )
    for i, role in enumerate(section.preload):
        where = f"$.residency.preload[{i}]"
        _check_role(where, role, index)
        if not settings[index[role]].on_demand:
            raise InvalidConfig(
                f"{where}: {shown(role)} is not on demand: it is started by run anyway"
            )
    _check_groups(section, index, settings)


def _check_groups(
    section: ResidencySection, index: dict[str, int], settings: Sequence[InstanceResidency]
) -> None:
    swap_of: dict[str, str] = {}
    names: set[str] = set()
    for g, group in enumerate(section.groups):
        where = f"$.residency.groups[{g}]"
        if group.name in names:
            raise InvalidConfig(f"{where}.name: {shown(group.name)} names two groups")
        names.add(group.name)
        for m, role in enumerate(group.members):
            field = f"{where}.members[{m}]"
            _check_role(field, role, index)
            if not group.swap:
                continue
            if not settings[index[role]].on_demand:
                raise InvalidConfig(
                    f"{field}: {shown(role)} is not on demand: a swap group holds on-demand "
                    "instances only (an always-on member could never be swapped out)"
                )
            if role in swap_of:
                raise InvalidConfig(
                    f"{field}: {shown(role)} is already in the swap group {shown(swap_of[role])}"
                )
            swap_of[role] = group.name
        preloaded = [role for role in group.members if role in section.preload]
        if group.swap and len(preloaded) > 1:
            raise InvalidConfig(
                f"$.residency.preload: {shown(preloaded[0])} and {shown(preloaded[1])} are in "
                f"the swap group {shown(group.name)}: only one of them can be resident"
            )


def _check_role(field: str, role: str, index: dict[str, int]) -> None:
    if role not in index:
        raise InvalidConfig(f"{field}: {shown(role)} is not an instance's role")


def _check_name(field: str, name: str) -> None:
    if not valid_token(name, 64):
        raise InvalidConfig(f"{field} must be a plain token (1-64 chars), got {shown(name)}")


def _check_bytes(field: str, value: int, *, positive: bool = False) -> None:
    low = 1 if positive else 0
    if not low <= value <= MAX_MEMORY_BYTES:
        raise InvalidConfig(f"{field} must be between {low} and 4 TiB (1<<42 bytes), got {value}")


def _check_count(field: str, value: int, low: int) -> None:
    if value < low:
        raise InvalidConfig(f"{field} must be at least {low}, got {value}")


def _check_seconds(field: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InvalidConfig(f"{field} must be a positive number of seconds, got {value}")


def _check_ttl(field: str, value: float) -> None:
    if math.isnan(value) or value <= 0:
        raise InvalidConfig(
            f"{field} must be a positive number of seconds (inf: never), got {value}"
        )
