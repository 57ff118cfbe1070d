"""Fixtures for the tests of the fake inference server: ``fakes``, which starts fakes as
real processes, each in its own session, and afterwards kills each group and checks that
nothing is left.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testing.fake_server_support import Fakes


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        started = Fakes(tmp_path, client)
        try:
            yield started
        finally:
            started.close()
