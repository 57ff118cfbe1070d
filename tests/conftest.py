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
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from inferactors._edges.llama_build import locate_llama_server
from inferactors._models.registry import ModelRegistry
from inferactors.testing import Workspace

# Support modules assert too: let pytest explain their failures as it does in test files.
pytest.register_assert_rewrite(
    "support", "proc_checks", "mlx_support", "actors", "e2e", "edges", "models", "policy", "testing"
)

from machine_share import MARKER, MachineShare, name_xdist_groups  # noqa: E402
from support import LAN_ADDRESS, Unprivileged  # noqa: E402  (after the rewrite is registered)

# The exposure check connects to the host's non-loopback addresses. Tests keep every
# packet on loopback: LAN_ADDRESS (127.x.y.z, this process's own) stands in for "a LAN
# address" (a server bound to 0.0.0.0 answers there, one bound to 127.0.0.1 does not).
# Child processes inherit this.
os.environ["INFERACTORS_LAN_ADDRESSES"] = LAN_ADDRESS

# Hypothesis's timing heuristics (an example's 200 ms deadline, "input generation is
# slow") judge the machine's load, not our code: off. Every property is still checked on
# the same number of examples; a test that wants a deadline sets its own.
settings.register_profile(
    "inferactors", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("inferactors")

_LOCKS = pytest.StashKey[Path]()
_SHARE = pytest.StashKey[MachineShare | None]()


def pytest_configure(config: pytest.Config) -> None:
    """Register ``exclusive``; in the controlling process of a parallel run, make the
    lock directory its workers share (``machine_share.py``)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}: measures real time against a bound: runs while no other test of a "
        "parallel run runs",
    )
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config.stash[_LOCKS] = MachineShare.create()
    config.stash[_SHARE] = MachineShare.join()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: twice the cores, at least 4, at most 16. Most tests wait (a server
    starting, a deadline, a process exiting), so two workers per core keep the CPUs busy;
    the ``exclusive`` ones have the machine to themselves whatever the count."""
    return min(max(4, 2 * (os.cpu_count() or 1)), 16)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``exclusive`` tests form one xdist group: one worker runs them one after another;
    with ``--dist loadgroup``, every group is named in its items' node ids."""
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(pytest.mark.xdist_group(MARKER))
    if getattr(config.option, "loadgroup", False):
        name_xdist_groups(items)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _LOCKS in config.stash:
        MachineShare.remove(config.stash[_LOCKS])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test of a parallel run holds the machine, shared or alone (``exclusive``)."""
    share = item.config.stash.get(_SHARE, None)
    if share is None:
        return (yield)
    alone = item.get_closest_marker(MARKER) is not None
    share.enter(alone=alone)
    try:
        return (yield)
    finally:
        if not (alone and nextitem is not None and nextitem.get_closest_marker(MARKER)):
            share.leave()


@pytest.fixture
def machine_alone(request: pytest.FixtureRequest) -> None:
    """The machine to this test alone from here to its end, as an ``exclusive`` test has
    it, for a test that measures real time but shares module fixtures with tests that do
    not (an ``exclusive`` mark would send it to another worker): taken once the fixtures
    named before this one are set up; given back when the test ends."""
    share = request.config.stash.get(_SHARE, None)
    if share is not None:
        share.enter(alone=True)


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory for one test, as pytest's own, but named by a counter (``t0``,
    ``t1``, ...) instead of the test's name: a Unix socket's path (a state directory's
    ``control.sock``) must stay under 108 bytes, and a parallel run puts every test's
    directory one level deeper (``popen-gwN/``)."""
    return tmp_path_factory.mktemp("t")


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
