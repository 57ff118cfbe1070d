"""Fixtures of the end-to-end tests: the field cases' ``bench``."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.field_support import Bench
from support import Unprivileged


@pytest.fixture
def bench(unprivileged: Unprivileged, server_dir: Path, registry_path: Path) -> Bench:
    """Programs and configs for one field-case test, run as the session's unprivileged user."""
    return Bench(unprivileged, server_dir, registry_path)
