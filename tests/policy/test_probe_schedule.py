"""The monitor's schedule (``_policy.probe_schedule``): short delays as given, running
probes on ticks of each instance's own phase, phases spread over the second."""

from __future__ import annotations

from collections import Counter

import pytest

from inferactors._policy.probe_schedule import (
    GRID_S,
    PACKED_INSTANCES,
    PHASE_SLOTS,
    PROBES_PER_SLOT,
    RUNNING_PROBE_S,
    next_probe_at,
    phase_of,
    probe_phase,
    startup_delay,
)

URLS = [f"http://127.0.0.1:{port}" for port in range(20000, 20100)]


def test_a_phase_is_the_same_for_the_same_url_and_in_zero_to_one() -> None:
    assert phase_of(URLS[0]) == phase_of(URLS[0])
    assert all(0.0 <= phase_of(url) < 1.0 for url in URLS)


def test_a_hundred_consecutive_ports_spread_over_the_second() -> None:
    windows = Counter(int(phase_of(url) * 100) for url in URLS)  # 10 ms windows
    assert max(windows.values()) <= 4
    assert len(windows) >= 55


def test_start_up_delays_double_to_the_cap_and_are_not_phased() -> None:
    assert [startup_delay(d) for d in (0.001, 0.01, 0.08, 1.0)] == [0.002, 0.02, 0.1, 0.1]
    assert next_probe_at(12.345, 0.04, phase=0.5) == pytest.approx(12.385)


@pytest.mark.parametrize("now", [0.0, 3.2, 3.7, 1000.25, 1000.7499])
def test_a_running_probe_lands_on_the_next_tick_of_its_phase(now: float) -> None:
    at = next_probe_at(now, RUNNING_PROBE_S, phase=0.75)
    assert 0.0 < at - now <= RUNNING_PROBE_S
    assert (at - 0.75) % 1.0 == pytest.approx(0.0, abs=1e-9) or (at - 0.75) % 1.0 == pytest.approx(
        1.0
    )


def test_a_probe_exactly_on_its_tick_waits_a_whole_period_not_zero() -> None:
    tick = 41.0 + 0.3
    assert next_probe_at(tick, RUNNING_PROBE_S, phase=0.3) == pytest.approx(tick + 1.0)
    assert next_probe_at(tick - 1e-12, RUNNING_PROBE_S, phase=0.3) == pytest.approx(tick + 1.0)


def test_a_probe_that_overran_its_tick_skips_to_the_next_one() -> None:
    assert next_probe_at(7.9, RUNNING_PROBE_S, phase=0.2) == pytest.approx(8.2)
    assert next_probe_at(8.25, RUNNING_PROBE_S, phase=0.2) == pytest.approx(9.2)


def test_a_runtimes_first_fifty_instances_share_five_ticks_ten_to_a_tick() -> None:
    phases = [probe_phase(ordinal) for ordinal in range(PACKED_INSTANCES)]
    assert PACKED_INSTANCES == 50
    assert set(phases[:PROBES_PER_SLOT]) == {0.0}  # up to 10 servers: one wake a period
    assert phases[PROBES_PER_SLOT] == pytest.approx(GRID_S)
    assert sorted(set(phases)) == pytest.approx([k * GRID_S for k in range(PHASE_SLOTS)])
    assert Counter(phases) == Counter({p: 10 for p in set(phases)})  # 10 per slot
    assert all(round(p / GRID_S, 9).is_integer() for p in phases)  # on the LISTEN grid


def test_later_instances_are_spread_over_the_period_not_bunched() -> None:
    phases = [probe_phase(ordinal) for ordinal in range(1000)]
    assert all(0.0 <= p < 1.0 for p in phases)
    spread = phases[PACKED_INSTANCES:]
    windows = Counter(int(p * 100) for p in spread)  # 10 ms windows
    assert len(windows) == 100  # every 10 ms of the second has some
    assert max(windows.values()) <= 2 * len(spread) / 100  # none more than twice its share
    instants = Counter(round(p, 9) for p in phases)
    assert max(instants.values()) == PROBES_PER_SLOT  # at most 10 probes at one instant
