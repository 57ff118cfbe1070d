"""Fixtures for the edge tests: a nursery, the leak check for tests that run processes, and
the instance directory and orphan-to-be of the orphan reaper's tests.

The ``wire`` fixture runs a probe test once per `ProbeClient` wire (the probe test modules
ask for it with ``pytestmark``). None is autouse: the leak check is asked for by the test
modules that want it (``pytestmark = pytest.mark.usefixtures("no_leaked_processes")``), so
other tests in this folder keep their own checks.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from edges.probe_support import CURRENT, WIRES, WireName
from edges.process_support import no_leaked_descendants


@pytest.fixture
def no_leaked_processes() -> Iterator[None]:
    """Adopt the test's orphans; afterwards reap the dead and fail on any survivor."""
    with no_leaked_descendants():
        yield


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


@pytest.fixture
def instance_dir(tmp_path: Path) -> Path:
    path = tmp_path / "chat-0123abcd-node"
    path.mkdir()
    return path


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """``sleep 600`` in its own session and without the parent-death signal: an orphan-to-be."""
    process = subprocess.Popen(["/bin/sleep", "600"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest) -> Iterator[WireName]:
    """Run the test once per `ProbeClient` wire (httpx, h11): `Fake.client` opens it."""
    CURRENT.wire = request.param
    try:
        yield request.param
    finally:
        CURRENT.wire = "httpx"
