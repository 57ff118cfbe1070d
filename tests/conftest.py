"""Shared fixtures: the real llama-server, the tiny GGUF model, a registry holding it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from inferactors._llama_build import locate_llama_server
from inferactors._registry import ModelRegistry
from inferactors.testing import write_tiny_gguf

# The exposure check connects to the host's non-loopback addresses. Tests keep every
# packet on loopback: 127.0.0.2 stands in for "a LAN address" (a server bound to 0.0.0.0
# answers there, one bound to 127.0.0.1 does not). Child processes inherit this.
os.environ["INFERACTORS_LAN_ADDRESSES"] = "127.0.0.2"


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
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny deterministic llama model, written once per test session."""
    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny.gguf")


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
