"""Shared fixtures: the real llama-server, the tiny GGUF model, a registry holding it, and
an unprivileged place to run managed servers from.

As root, inferactors refuses to run a managed server without ``run_as`` (issue 3, item 6),
so every test that starts a real server runs it as ``nobody``, from a world-readable
workspace under /tmp, with an interpreter that ``nobody`` can execute.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferactors._edges.containment import SEARCH, access_problem, resolve_run_as
from inferactors._edges.llama_build import locate_llama_server
from inferactors._models.registry import ModelRegistry
from inferactors.testing import write_tiny_gguf

# Support modules assert too: let pytest explain their failures as it does in test files.
pytest.register_assert_rewrite(
    "support", "proc_checks", "mlx_support", "actors", "e2e", "edges", "models", "policy", "testing"
)

from support import Unprivileged  # noqa: E402  (after the rewrite is registered)

# The exposure check connects to the host's non-loopback addresses. Tests keep every
# packet on loopback: 127.0.0.2 stands in for "a LAN address" (a server bound to 0.0.0.0
# answers there, one bound to 127.0.0.1 does not). Child processes inherit this.
os.environ["INFERACTORS_LAN_ADDRESSES"] = "127.0.0.2"

UNPRIVILEGED_USER = "nobody"


def _server_python(run_as: str | None) -> str:
    if run_as is None:
        return sys.executable
    user = resolve_run_as(run_as)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        sys.executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
        shutil.which(f"python{version}") or "",
    ]
    for candidate in candidates:
        usable = candidate and Path(candidate).exists()
        if usable and access_problem(user, Path(candidate), SEARCH) is None:
            return candidate
    pytest.fail(
        f"no Python {version} interpreter that user {run_as} can execute (tried "
        f"{', '.join(c for c in candidates if c)}); tests that run Python servers as an "
        "unprivileged user need one (apt-get install python3)"
    )


@pytest.fixture(scope="session")
def unprivileged() -> Iterator[Unprivileged]:
    """The session's unprivileged workspace (see `Unprivileged`)."""
    run_as = UNPRIVILEGED_USER if os.geteuid() == 0 else None
    workspace = Path(tempfile.mkdtemp(prefix="inferactors-tests-", dir="/tmp"))
    workspace.chmod(0o755)
    paths = sysconfig.get_paths()
    source = str(Path(__file__).resolve().parent.parent / "src")
    sys_path = tuple(dict.fromkeys((paths["purelib"], paths["platlib"], source)))
    try:
        yield Unprivileged(run_as, workspace, _server_python(run_as), sys_path)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.fixture
def server_dir(unprivileged: Unprivileged) -> Path:
    """A fresh world-readable directory for one test's data root and programs."""
    return unprivileged.directory("test")


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The real llama-server; `make test` builds or finds one before pytest runs."""
    found = locate_llama_server()
    if found is None:
        pytest.fail(
            "no llama-server found: run `make test` (it builds the pinned one once), "
            "or set INFERACTORS_LLAMA_SERVER to a llama-server binary"
        )
    return found


@pytest.fixture(scope="session")
def tiny_gguf(unprivileged: Unprivileged) -> Path:
    """The tiny deterministic llama model, written once per session where servers can read it."""
    return write_tiny_gguf(unprivileged.directory("models") / "tiny.gguf")


@pytest.fixture
def registry_path(tmp_path: Path, tiny_gguf: Path) -> Path:
    """A fresh registry file with the tiny model registered as ``tiny``."""
    path = tmp_path / "models.json"
    ModelRegistry.open(path).add(tiny_gguf, name="tiny")
    return path


@pytest.fixture
def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
