"""Fixtures of the end-to-end tests: the field cases' ``bench``, and ``managed_config``, the
managed config that runs the real llama-server as the unprivileged user."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.field_support import Bench
from inferactors._config.config import InferConfig, ManagedConfig
from inferactors._flavor import InferFlavor
from support import Unprivileged


@pytest.fixture
def bench(unprivileged: Unprivileged, server_dir: Path, registry_path: Path) -> Bench:
    """Programs and configs for one field-case test, run as the session's unprivileged user."""
    return Bench(unprivileged, server_dir, registry_path)


@pytest.fixture
def managed_config(
    server_dir: Path, registry_path: Path, llama_server: Path, unprivileged: Unprivileged
) -> InferConfig:
    """Managed llama.cpp: the registry's "tiny", the real llama-server, run as the unprivileged
    user."""
    managed = ManagedConfig(
        registry=registry_path,
        data_root=server_dir / "state",
        serve_program=llama_server,
        run_as=unprivileged.run_as,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)
