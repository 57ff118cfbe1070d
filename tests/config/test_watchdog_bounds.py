"""A per-instance deep-health watchdog whose interval or deadline is too short to honour
(0.01 s: a healthy server killed over and over) is refused when the run file loads, naming
the field; the shortest accepted values load."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.convert import run_config_from_toml
from inferactors._config.supervision import MIN_WATCHDOG_INTERVAL_S, MIN_WATCHDOG_TIMEOUT_S
from inferactors._errors import InvalidConfig

RUN_FILE = """
[managed]
registry = "models.json"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "/bin/llama-server" }}

[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "m"
serve = {{ port = 8090 }}
supervision = {{ watchdog = {{ interval_s = {interval}, timeout_s = {timeout}, failures = 1 }} }}
"""


def load(interval: float, timeout: float) -> None:
    text = RUN_FILE.format(interval=interval, timeout=timeout)
    run_config_from_toml(text, Path("/etc/inferactors"), "run.toml: ")


@pytest.mark.parametrize(
    ("interval", "timeout", "field"),
    [(0.01, 5.0, "interval_s"), (30.0, 0.005, "timeout_s"), (0.01, 0.005, "interval_s")],
)
def test_a_watchdog_too_short_to_honour_is_refused_naming_the_field(
    interval: float, timeout: float, field: str
) -> None:
    with pytest.raises(InvalidConfig) as refused:
        load(interval, timeout)
    said = str(refused.value)
    assert f"supervision.watchdog.{field} = " in said
    assert "too short to honour" in said


def test_the_shortest_honoured_watchdog_loads() -> None:
    load(MIN_WATCHDOG_INTERVAL_S, MIN_WATCHDOG_TIMEOUT_S)
