"""When the monitor probes next (pure; no I/O, no clock: the caller passes ``now``).

Three regimes:

* starting: `FIRST_PROBE_S` after the spawn, doubling up to `STARTUP_PROBE_CAP_S`;
* a readiness line was read (``ready_lines``): a probe at once, then doubling from
  `LINE_PROBE_S` up to the same cap, so a server that answers a few ms after its line is seen
  a few ms later rather than at the next tick of the slower schedule;
* up: every `RUNNING_PROBE_S`, on ticks of the instance's own phase (`probe_phase`): tick
  ``k`` is at ``(k + phase) * RUNNING_PROBE_S`` on the runtime's clock. A probe that
  overran its tick waits for the next one (no burst to catch up).

The first phases are packed, not spread (`probe_phase`): a runtime's first
`PROBES_PER_SLOT` instances share slot 0 of a 200 ms grid (`GRID_S`), the next ones
slot 1, and so on up to
`PACKED_INSTANCES` (50); a running managed server's record refresh falls on its probe's
tick too. So a runtime of up to 10 servers wakes the loop once a second for all of their
periodic work, and of up to 50, at most 5 times. On this 2-core VM a wake of the trio loop
from a 200 ms sleep cost 0.38 ms of CPU (0.1 ms when it came 0.2 ms after the last), most
of it the loop's own pass with cold caches: one wake for the probes and refreshes of
several servers costs about what one of them alone did (``bench/bench_idle.py``). Beyond
50, a runtime is busy enough that its wakes come close together anyway, and bursts would
be its cost: those instances' phases are spread evenly over the period (a golden-ratio
sequence), so 1,000 servers make at most 10 probes at one instant, not 200.
"""

from __future__ import annotations

import hashlib
import math

FIRST_PROBE_S = 0.01
"""The monitor's first delay after a spawn (float seconds); it doubles up to
`STARTUP_PROBE_CAP_S`."""

STARTUP_PROBE_CAP_S = 0.1
"""Longest delay between probes of a server that is not up yet (float seconds)."""

LINE_PROBE_S = 0.001
"""Where the doubling restarts when a readiness line is read (float seconds): the probe the
line starts is at once, the next ones 2, 4, 8 ... ms apart, up to `STARTUP_PROBE_CAP_S`."""

RUNNING_PROBE_S = 1.0
"""Delay between probes of a server that is up (float seconds)."""

_MIN_GAP = 1e-6
"""Share of the period under which a tick counts as the one just probed (float rounding)."""


def phase_of(key: str) -> float:
    """A phase in [0, 1) spread uniformly over keys, the same for the same key (``key``: the
    instance's base URL, unique among running instances)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


PHASE_SLOTS = 5
"""How many phases a probe tick can have in a period (`probe_phase`)."""

GRID_S = RUNNING_PROBE_S / PHASE_SLOTS
"""The runtime's grid (float seconds, 0.2): the packed probe ticks fall on it."""


PROBES_PER_SLOT = 10
"""How many instances of a runtime share a slot before the next slot is used
(`probe_phase`)."""

PACKED_INSTANCES = PROBES_PER_SLOT * PHASE_SLOTS
"""How many of a runtime's instances get packed phases (`probe_phase`): 50."""

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def probe_phase(ordinal: int) -> float:
    """The phase (a fraction of the period, in [0, 1)) of the probe ticks of a runtime's
    ``ordinal``-th instance (0: the first loaded). The first `PACKED_INSTANCES` are packed:
    `PROBES_PER_SLOT` to a slot of the 200 ms grid, slot 0 first. Later ones are spread:
    ``ordinal`` times the golden ratio, modulo 1, which leaves no two phases close for
    long runs of ordinals (one in [0, 1) every 1/N or so for N of them)."""
    if ordinal < PACKED_INSTANCES:
        return (ordinal // PROBES_PER_SLOT) / PHASE_SLOTS
    return (ordinal * _GOLDEN) % 1.0


def startup_delay(previous: float) -> float:
    """The next delay of a server that is not up: ``previous`` doubled, at most
    `STARTUP_PROBE_CAP_S` (float seconds)."""
    return min(previous * 2, STARTUP_PROBE_CAP_S)


def next_probe_at(now: float, delay: float, phase: float) -> float:
    """When to probe next, ``delay`` float seconds after ``now`` as the regime says: a delay
    of `RUNNING_PROBE_S` or more lands on the next tick of ``phase`` after
    ``now`` (at most one period away); a shorter one is ``now + delay``. ``phase`` is a
    fraction of the period (`probe_phase`)."""
    if delay < RUNNING_PROBE_S:
        return now + delay
    return next_tick(now, RUNNING_PROBE_S, phase)


def next_tick(now: float, period: float, phase: float = 0.0) -> float:
    """The next tick after ``now`` of a grid of ``period`` float seconds shifted by ``phase``
    (a fraction of the period), at least `_MIN_GAP` of a period ahead (a float quotient can
    land just short of ``now``). Shared by the probes and the exposure watch."""
    offset = phase * period
    at = (math.floor((now - offset) / period) + 1) * period + offset
    if at - now < _MIN_GAP * period:
        at += period
    return at
