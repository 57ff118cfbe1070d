"""Shared fixtures: the real llama-server, a registry holding the tiny model, and an
unprivileged place to run managed servers from.

As root, inferactors refuses to run a managed server without ``run_as`` (issue 3, item 6),
so every test that starts a real server runs it as ``nobody``, from a world-readable
workspace under /tmp, with an interpreter that ``nobody`` can execute. That workspace and
the tiny GGUF are the kit's (``inferactors.testing.pytest_plugin``, loaded by its pytest11
entry point): ``inferactors_workspace`` and ``tiny_gguf``, the same a downstream suite gets.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from inferactors._edges.llama_build import locate_llama_server
from inferactors._models.registry import ModelRegistry
from inferactors.testing import Workspace

# Support modules assert too: let pytest explain their failures as it does in test files.
pytest.register_assert_rewrite(
    "support", "proc_checks", "mlx_support", "actors", "e2e", "edges", "models", "policy", "testing"
)

from support import Unprivileged  # noqa: E402  (after the rewrite is registered)

# The exposure check connects to the host's non-loopback addresses. Tests keep every
# packet on loopback: 127.0.0.2 stands in for "a LAN address" (a server bound to 0.0.0.0
# answers there, one bound to 127.0.0.1 does not). Child processes inherit this.
os.environ["INFERACTORS_LAN_ADDRESSES"] = "127.0.0.2"


@pytest.fixture(scope="session")
def unprivileged(inferactors_workspace: Workspace) -> Unprivileged:
    """The session's unprivileged workspace (the kit's ``inferactors_workspace``)."""
    return inferactors_workspace


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
