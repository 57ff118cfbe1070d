"""The supervisor's overload, as `inferactors run` reports it: the lost-verdict counter
moves while the overload lasts (read at each scrape), not only when it ends; and two
runtimes in one fleet (one per flavor and mode) report one event loop's overload once,
not once each. Before, ``inferactors_supervisor_no_verdicts_total`` read 0 for minutes of
overload, and a mixed run file logged each overload and each catching up twice.

Real trio loop (a real stall of 0.4 s), two adopted runtimes with nothing to adopt.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from inferactors._config.convert import load_run_config
from inferactors._edges.loop_lag import loop_lag
from inferactors._events import SupervisorCaughtUp, SupervisorOverloaded
from inferactors._policy.lateness import CALM_S
from inferactors._service.fleet_open import open_fleet
from inferactors.testing._fake_processes import free_port

pytestmark = pytest.mark.exclusive  # it stalls the loop for real


def _run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(
        'node_id = "n"\n'
        f'[[instances]]\nmode = "adopted"\nrole = "a"\nruntime = "infer.llamacpp"\n'
        f"serve = {{ port = {free_port()} }}\n"
        f'[[instances]]\nmode = "adopted"\nrole = "b"\nruntime = "infer.mlx-lm"\n'
        f"serve = {{ port = {free_port()} }}\n"
    )
    return path


def _lost(text: bytes) -> float:
    for line in text.decode().splitlines():
        if line.startswith("inferactors_supervisor_no_verdicts_total "):
            return float(line.split()[1])
    raise AssertionError("no inferactors_supervisor_no_verdicts_total")


async def test_one_overload_is_reported_once_and_counted_while_it_lasts(tmp_path: Path) -> None:
    path = _run_file(tmp_path)
    async with open_fleet(load_run_config(path), path) as fleet:
        assert len(fleet.hosts) == 2  # two runtimes on one event loop
        await trio.sleep(0.2)
        time.sleep(0.4)  # noqa: ASYNC251 (the point: the loop really stalls)
        await trio.sleep(0.2)
        loop_lag().lost_verdict("GET /health: no verdict (test)")
        loop_lag().lost_verdict("GET /health: no verdict (test)")
        await fleet.refresh_metrics()
        assert loop_lag().overloaded is not None  # still overloaded
        assert _lost(fleet.metrics_text()) == 2.0  # counted while it lasts
        with trio.fail_after(CALM_S + 5):
            while not any(  # noqa: ASYNC110 (the fleet's own record)
                isinstance(e, SupervisorCaughtUp) for e in fleet.recent_events(100)
            ):
                await trio.sleep(0.1)
        await trio.sleep(0.5)  # the other runtime's report, if any, has come too
        await fleet.refresh_metrics()
        events = fleet.recent_events(100)
        text = fleet.metrics_text()
    overloads = [e for e in events if isinstance(e, SupervisorOverloaded)]
    caught_up = [e for e in events if isinstance(e, SupervisorCaughtUp)]
    assert len(overloads) == 1, overloads
    assert len(caught_up) == 1, caught_up
    assert caught_up[0].no_verdicts == 2
    assert _lost(text) == 2.0  # not counted again when it catches up
