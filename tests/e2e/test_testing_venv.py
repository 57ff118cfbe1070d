"""Done-when of issue 12: a fresh virtualenv with only ``inferactors[testing]`` (and the
pytest it brings) runs the three examples of examples/testing/ green, as ourselves and (as
root) as ``nobody``, and ``pytest --fixtures`` lists the plugin's fixtures with their
docstrings.

The virtualenv is built once (``pip install '<repo>[testing]'``, about a minute) under /tmp,
keyed by a hash of pyproject.toml, and reused while it stays the same (older ones are
removed); each session reinstalls the package itself from the work tree (``--no-deps``, a few
seconds), so the venv runs the current sources. The test is skipped, saying so, when pip
cannot reach the package registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.testing_examples_support import NAMES, copy_example, run_pytest, users
from inferactors.testing import Workspace
from inferactors.testing._workspace import server_python

REPO = Path(__file__).resolve().parents[2]
FIXTURES = (
    "fake_llama_server",
    "fake_mlx_server",
    "fake_ollama",
    "inferactors_fakes",
    "tiny_gguf",
    "tiny_mlx_model",
    "inferactors_workspace",
    "inferactors_kit",
    "inferactors_runtime",
)
PIP_S = 600.0
PREFIX = "inferactors-testing-venv-"


def pyproject_key() -> str:
    """A hash of pyproject.toml: the dependencies the venv holds."""
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=PIP_S,
        check=False,
    )


def build_venv(target: Path, python: str) -> None:
    """A fresh venv at ``target`` with ``<repo>[testing]``; skip if the registry is away."""
    staging = target.with_name(target.name + f".{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(staging)], check=True, timeout=PIP_S)
    reach = pip(staging, "download", "--no-deps", "-d", str(staging / "probe"), "hatchling")
    if reach.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"pip cannot reach the package registry: {reach.stderr.strip()[-300:]}")
    installed = pip(staging, "install", "--quiet", f"{REPO}[testing]")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    staging.chmod(0o755)
    for stale in target.parent.glob(PREFIX + "*"):
        if stale.is_dir() and not stale.name.startswith(target.name):
            shutil.rmtree(stale, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another run finished first: use its venv


@pytest.fixture(scope="module")
def fresh_venv() -> Path:
    """The cached fresh venv (built by an interpreter ``nobody`` can execute, as root)."""
    python = server_python("nobody" if os.geteuid() == 0 else None)
    target = Path("/tmp") / f"{PREFIX}{pyproject_key()}"
    if not (target / "bin" / "python").exists():
        build_venv(target, python)
    fresh = pip(target, "install", "--quiet", "--no-deps", "--force-reinstall", str(REPO))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    return target


def test_the_venv_holds_only_the_testing_extra(fresh_venv: Path) -> None:
    listed = pip(fresh_venv, "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"inferactors", "pytest", "pytest-trio", "gguf", "ollama"} <= names
    assert not names & {"mlx", "mlx-lm", "hypothesis", "mypy"}


@pytest.mark.parametrize("user", users(), ids=lambda user: user or "self")
@pytest.mark.parametrize("name", NAMES)
def test_an_example_passes_in_the_fresh_venv(
    fresh_venv: Path, name: str, user: str | None, inferactors_workspace: Workspace
) -> None:
    directory = copy_example(name, inferactors_workspace.directory("venv-example"), user)
    done = run_pytest(str(fresh_venv / "bin" / "python"), directory, user)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
    assert "failed" not in done.stdout


def test_pytest_fixtures_lists_the_plugins_fixtures_with_docstrings(
    fresh_venv: Path, inferactors_workspace: Workspace
) -> None:
    directory = inferactors_workspace.directory("fixtures")
    done = run_pytest(str(fresh_venv / "bin" / "python"), directory, None, args=["--fixtures"])
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: no tests collected
    lines = done.stdout.splitlines()
    for fixture in FIXTURES:
        at = next((i for i, line in enumerate(lines) if line.startswith(fixture + " ")), None)
        assert at is not None, f"{fixture} not listed:\n{done.stdout}"
        assert "inferactors/testing/pytest_plugin.py" in lines[at]
        assert lines[at + 1].startswith("    "), fixture
        assert "no docstring" not in lines[at + 1], fixture
