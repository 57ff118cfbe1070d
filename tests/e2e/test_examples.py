"""The README's examples run as shown, every run file under examples/ loads, and every file
under examples/ is run or parsed by some test (issue 10 item 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.testing_examples_support import NAMES
from inferactors import load_run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_all_flavors_reach_running_and_pass_deep_health(
    server_dir: Path, llama_server: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "all_flavors.py"), str(server_dir / "work")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for role, runtime in (("chat", "llamacpp"), ("code", "mlx-lm"), ("notes", "ollama")):
        assert f"started (infer.{runtime})" in out
        assert any(
            line.split()[2:3] == [role]  # time, level, then the instance's name (its role)
            and "deep health: one token" in line
            for line in out.splitlines()
        ), role
    assert "3 of 3 instances passed deep health" in out


@pytest.mark.parametrize("run_file", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_run_file_loads(run_file: Path) -> None:
    config = load_run_config(run_file)
    assert config.instances, f"{run_file.name} declares no instance"


CHECKED = {
    "all_flavors.py": "run: test_all_flavors_reach_running_and_pass_deep_health",
    "crashing.toml": "run: test_example_crashing.py",
    "crashing.out": "compared with a real run: test_example_crashing.py",
    "run.toml": "loaded: test_every_example_run_file_loads",
    "operate.toml": "loaded here; the README session on it run: test_operate_session.py",
    "on_demand.toml": "loaded here; the README session on it run: test_on_demand_session.py",
}
"""Each file directly under examples/ and the test that runs or parses it."""


def test_every_example_file_is_run_or_parsed() -> None:
    top = {path.name for path in EXAMPLES.iterdir() if path.is_file()}
    assert top == set(CHECKED)
    projects = {path.name for path in (EXAMPLES / "testing").iterdir() if path.is_dir()}
    assert projects - {"__pycache__"} == set(NAMES)  # run by test_testing_examples.py
