"""The residency ledger's figures (pure; no I/O, no clock): bytes per resource, each
instance's three-figure footprint, the budget, and memory held by other programs.

**Resources.** ``memory`` (the machine's RAM) and any accelerator the operator declares
(``gpu0``): `Bytes` holds a figure per resource, and every sum and comparison is per
resource, so a model fits only where every resource it uses fits.

**Three figures per instance** (`Footprint`):

- *declared*: what the registry pins exactly (the weight shards' bytes) plus the KV cache
  computed from the GGUF header at the configured context, parallel slots and cache type
  (``_policy/kv_cache.py``), plus the spec's own ``memory`` figures;
- *estimated*: what comes on top and is only estimated: compute and output buffers, the
  projector, the draft model, the server program itself;
- *measured*: once the server runs, its process tree's RSS, and the buffer sizes the
  server itself logged (``_policy/buffer_lines.py``); the larger of the two, since RSS
  misses mapped weights not yet touched and the log lines miss the program.

Admission counts the measured figure once the process tree's RSS is known (a later start
of the same instance still uses it), but never less than the declared bytes: the pinned
weights and the KV cache are what the server allocates, and RSS misses what is mapped but
not yet touched; measuring corrects the estimate, not the pins. The logged buffers alone
(they leave out the program itself) only raise the figure above the estimate, never lower
it. Before a measure it counts declared plus estimated. When measured and expected
(declared + estimated) differ by more than `DRIFT_RATIO` (and more than `DRIFT_MIN_BYTES`),
that is drift, an event.

**Budget and other programs.** The budget is the part of the machine's memory set aside
for models: ``auto`` is the total less a reserve, or the operator's bytes. Memory other
programs use counts against the budget only for what it takes beyond the rest of the
machine (`foreign_in_budget`): with ``auto``, what they use beyond the reserve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from .sizes import GB as GB
from .sizes import size_text as size_text

MEMORY = "memory"
"""The machine's memory, the one resource every instance uses."""

DRIFT_RATIO = 0.25
"""Measured and expected differ by more than this fraction of expected: drift."""
DRIFT_MIN_BYTES = 64 << 20
"""...and by more than this many bytes (a tiny model's few MiB are noise, not drift)."""


@attrs.frozen
class Bytes:
    """Bytes per resource (``memory``, ``gpu0``, ...); a resource absent is 0.

    ``items`` are sorted by resource name, without zeros, so equal figures compare equal.
    """

    items: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, memory: int = 0, devices: Iterable[tuple[str, int]] = ()) -> Bytes:
        """``memory`` bytes of RAM plus each ``(device, bytes)``."""
        return cls.from_map({MEMORY: memory, **dict(devices)})

    @classmethod
    def from_map(cls, figures: Mapping[str, int]) -> Bytes:
        """From a mapping of resource to bytes (zeros dropped)."""
        return cls(tuple(sorted((k, v) for k, v in figures.items() if v != 0)))

    def get(self, resource: str) -> int:
        """The figure of ``resource`` (0 when absent)."""
        return dict(self.items).get(resource, 0)

    @property
    def memory(self) -> int:
        """The RAM figure."""
        return self.get(MEMORY)

    def resources(self) -> tuple[str, ...]:
        """The resources with a non-zero figure, sorted."""
        return tuple(name for name, _ in self.items)

    def __add__(self, other: Bytes) -> Bytes:
        total = dict(self.items)
        for name, value in other.items:
            total[name] = total.get(name, 0) + value
        return Bytes.from_map(total)

    def __sub__(self, other: Bytes) -> Bytes:
        total = dict(self.items)
        for name, value in other.items:
            total[name] = total.get(name, 0) - value
        return Bytes.from_map(total)

    def clipped(self) -> Bytes:
        """Every negative figure raised to 0."""
        return Bytes.from_map({k: max(0, v) for k, v in self.items})

    def short_in(self, room: Bytes) -> tuple[str, ...]:
        """The resources where this need exceeds ``room`` (an exact fit is fine)."""
        return tuple(name for name, value in self.items if value > room.get(name))

    def fits(self, room: Bytes) -> bool:
        """Whether this need fits ``room`` in every resource."""
        return not self.short_in(room)


def total(figures: Iterable[Bytes]) -> Bytes:
    """The sum of ``figures``."""
    result = Bytes()
    for figure in figures:
        result = result + figure
    return result


@attrs.frozen
class Footprint:
    """One instance's memory, in bytes (module docstring).

    Attributes:
        declared: registry shard bytes, plus the KV cache from the GGUF header, plus the
            spec's ``memory`` figures.
        estimated: compute and output buffers, projector, draft model, the program.
        measured_rss: the server's process tree RSS, once measured (else None).
        engine: the sum of the buffer sizes the server logged while loading (else None).
        devices: declared use of each accelerator.
        kv: the KV cache part of ``declared`` (0 when unknown), for status.
    """

    declared: int = 0
    estimated: int = 0
    measured_rss: int | None = None
    engine: int | None = None
    devices: tuple[tuple[str, int], ...] = ()
    kv: int = 0

    @property
    def expected(self) -> int:
        """Declared plus estimated."""
        return self.declared + self.estimated

    @property
    def measured(self) -> int | None:
        """The larger of the RSS and the logged buffers, None before either is known."""
        known = [value for value in (self.measured_rss, self.engine) if value is not None]
        return max(known) if known else None

    @property
    def figure(self) -> int:
        """The memory admission counts: measured once the RSS is known (at least
        declared), else expected (raised by the logged buffers when they exceed it)."""
        measured = self.measured
        if measured is None:
            return self.expected
        if self.measured_rss is None:
            return max(self.expected, measured)
        return max(self.declared, measured)

    def need(self) -> Bytes:
        """Every resource it holds while resident."""
        return Bytes.of(self.figure, self.devices)

    def drifted(self) -> bool:
        """Whether measured and expected differ past `DRIFT_RATIO` and `DRIFT_MIN_BYTES`
        (the logged buffers alone count only when they exceed expected)."""
        measured = self.measured
        if measured is None or (self.measured_rss is None and measured <= self.expected):
            return False
        gap = abs(measured - self.expected)
        return gap > DRIFT_MIN_BYTES and gap > DRIFT_RATIO * self.expected


@attrs.frozen
class Machine:
    """The machine's memory as last measured: ``total`` and ``available`` bytes (what
    can be given to a new program without swapping, psutil's ``available``)."""

    total: int
    available: int

    @property
    def used(self) -> int:
        """Bytes in use."""
        return max(0, self.total - self.available)


def auto_budget(total_bytes: int, reserve_bytes: int) -> int:
    """The ``auto`` memory budget: the machine's total less the reserve (at least 0)."""
    return max(0, total_bytes - reserve_bytes)


def foreign_bytes(machine: Machine, ours: int) -> int:
    """Memory other programs use: what is in use less ``ours`` (our servers' measured
    RSS and the adopted servers' declared figures), at least 0."""
    return max(0, machine.used - ours)


def foreign_in_budget(foreign: int, machine_total: int, budget_memory: int) -> int:
    """The part of other programs' memory that falls inside the budget: what they use
    beyond the part of the machine outside it (``machine_total - budget_memory``)."""
    return max(0, foreign - max(0, machine_total - budget_memory))
