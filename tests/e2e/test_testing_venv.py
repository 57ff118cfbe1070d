"""Done-when of issue 12: a fresh virtualenv with ``inferactors[testing]`` alone holds no
model makers, and with ``[testing-models]`` (and the Ollama example's ``ollama``) runs the
three examples of examples/testing/ green, as ourselves and (as
root) as ``nobody``, and ``pytest --fixtures`` lists the plugin's fixtures with their
docstrings.

The virtualenv is built once (``pip install '<repo>[testing]'``, about a minute) under /tmp,
keyed by a hash of pyproject.toml, and reused while it stays the same (a venv of another
key unused for `STALE_S` is removed: other clones may use other keys); each session
reinstalls the package itself from the work tree (``--no-deps``, a few seconds), so the
venv runs the current sources. The venvs are shared by every test session of one user on
the machine (other clones, other workers; each user has its own, `USER`): each test holds
an exclusive ``flock`` on `LOCK` from before it looks at them until it is done, and the
tests form one xdist group (one worker runs them all, so the sources are installed once).
The test is skipped, saying so, when pip cannot reach the package registry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
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
TESTING_ONLY = "testing-extra.txt"
"""In the venv: ``pip list`` after installing ``[testing]`` alone, before the rest."""
USER = "" if os.geteuid() == 0 else f"-uid{os.geteuid()}"
"""In the names of a user's venvs and lock but root's: another user can write neither a
venv nor a lock that root made in /tmp (nor root's ``nobody`` run a venv under a home)."""
PREFIX = f"inferactors-testing-venv{USER}-"
LOCK = Path("/tmp") / f"inferactors-testing-venv{USER}.lock"
"""Held while a session of this user builds, reinstalls, runs or removes a shared venv."""
STALE_S = 3 * 86400.0
"""A venv of another key unused this long (its mtime, touched at each use) is removed."""

pytestmark = pytest.mark.xdist_group("testing-venv")


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
    """A fresh venv at ``target`` with ``<repo>[testing]`` (in place of an unfinished one);
    skip if the registry is away. Called with `LOCK` held."""
    staging = target.with_name(target.name + f".{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(staging)], check=True, timeout=PIP_S)
    reach = pip(staging, "download", "--no-deps", "-d", str(staging / "probe"), "hatchling")
    if reach.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"pip cannot reach the package registry: {reach.stderr.strip()[-300:]}")
    installed = pip(staging, "install", "--quiet", f"{REPO}[testing]")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (staging / TESTING_ONLY).write_text(pip(staging, "list", "--format=freeze").stdout)
    # The runtime kit writes the tiny GGUF ([testing-models]); the Ollama example's own
    # dependency is the official client.
    more = pip(staging, "install", "--quiet", f"{REPO}[testing-models]", "ollama>=0.6")
    assert more.returncode == 0, more.stdout + more.stderr
    staging.chmod(0o755)
    for stale in target.parent.glob(PREFIX + "*"):
        info = stale.stat()
        unused_s = time.time() - info.st_mtime
        ours = info.st_uid == os.geteuid()  # root's prefix also matches other users' venvs
        if (
            stale.is_dir()
            and ours
            and not stale.name.startswith(target.name)
            and unused_s > STALE_S
        ):
            shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)  # what an interrupted build left
    staging.rename(target)


INSTALLED = f"{REPO} {os.getpid()} {time.time()}"
"""Who installed the sources in a venv last: this work tree, in this process."""


@contextlib.contextmanager
def venv_lock() -> Iterator[None]:
    """The machine-wide lock on the shared venvs (`LOCK`), held inside."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@pytest.fixture
def fresh_venv() -> Iterator[Path]:
    """The cached fresh venv (built by an interpreter ``nobody`` can execute, as root),
    holding this work tree's sources (installed again when another process put its own
    there), locked for the test."""
    python = server_python("nobody" if os.geteuid() == 0 else None)
    target = Path("/tmp") / f"{PREFIX}{pyproject_key()}"
    marker = target / "installed-from"
    with venv_lock():
        if not (target / "bin" / "python").exists():
            build_venv(target, python)
        os.utime(target)  # in use: not stale
        if not marker.exists() or marker.read_text() != INSTALLED:
            fresh = pip(target, "install", "--quiet", "--no-deps", "--force-reinstall", str(REPO))
            assert fresh.returncode == 0, fresh.stdout + fresh.stderr
            marker.write_text(INSTALLED)
        yield target


def test_the_testing_extra_holds_no_model_makers(fresh_venv: Path) -> None:
    """``[testing]`` fakes servers: no numpy, tokenizers, gguf or pydantic (the Ollama
    client's); ``[testing-models]`` adds the tiny-model makers."""
    alone = (fresh_venv / TESTING_ONLY).read_text()
    names = {line.split("==")[0].lower().replace("_", "-") for line in alone.split()}
    assert {"inferactors", "pytest", "pytest-trio", "h11"} <= names
    heavy = {"numpy", "tokenizers", "gguf", "safetensors", "pydantic", "ollama", "huggingface-hub"}
    assert not names & heavy, names & heavy
    listed = pip(fresh_venv, "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"gguf", "numpy", "safetensors", "tokenizers", "ollama"} <= names
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
