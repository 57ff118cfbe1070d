"""Fixtures shared by the tests in tests/actors; the plain helpers are in ``*_support``.

Ollama (``ollama_support``): ``fake``, a fake daemon for the MockClock rig, and
``registry_file``, a registry naming the Ollama tag. Stateful supervision
(``stateful_support``): ``inline_threads`` and ``make_config``. Managed llama.cpp
(``managed_support``): ``lab``, where one test's managed servers run. Pins at every spawn
(``pin_support``): ``pin_lab``, a model the test may tamper with. The support modules
are imported as ``actors.<name>`` (``tests/`` is on ``sys.path``), the name mypy knows them
by with ``explicit_package_bases``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing

from actors.managed_support import HELPER, Lab, server_program
from actors.ollama_support import NAME, TAG
from actors.pin_support import PinLab
from actors.stateful_support import POLICY, READINESS_S
from inferactors import InferConfig, InferFlavor, ManagedConfig, ModelRegistry
from inferactors.testing._fake_ollama import FakeOllama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig
from support import Unprivileged

T = TypeVar("T")


# Ollama.


@pytest.fixture
async def fake(autojump_clock: trio.testing.MockClock) -> FakeOllama:
    """A fake with ``tiny`` pulled and ``other:7b`` loaded by someone else. Tests using it
    name ``autojump_clock`` too: pytest-trio takes the clock only from a test's arguments."""
    return FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("other:7b",)))


@pytest.fixture
def registry_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.json"
    ModelRegistry.open(path).add_ollama(NAME, TAG)
    return path


# Stateful supervision.


@pytest.fixture
def inline_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``trio.to_thread.run_sync`` work inline, in the trio thread.

    Under ``autojump_threshold=0`` a task waiting for a worker thread counts as blocked, so
    the MockClock leaps to the next deadline (a readiness timer, a backoff, even
    ``fail_after``'s) while the thread runs: virtual time would depend on real thread
    timing. The runtime's thread work here is small file I/O and fake edges.
    """

    async def run_inline(sync_fn: Callable[..., T], *args: object, **_options: object) -> T:
        await trio.lowlevel.checkpoint()
        return sync_fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_inline)


@pytest.fixture(scope="module")
def make_config(
    tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path
) -> Callable[[], InferConfig]:
    """Configs sharing one registry (the tiny model as ``tiny``), each with a fresh data root."""
    registry = tmp_path_factory.mktemp("stateful") / "models.json"
    ModelRegistry.open(registry).add(tiny_gguf, name="tiny")

    def config() -> InferConfig:
        managed = ManagedConfig(
            registry=registry,
            data_root=tmp_path_factory.mktemp("state"),
            serve_program=Path("/bin/true"),  # never run: the fleet fakes spawning
            restart=POLICY,
            readiness_timeout_s=READINESS_S,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=5.0)

    return config


# Managed llama.cpp.


@pytest.fixture
def lab(registry_path: Path, server_dir: Path, unprivileged: Unprivileged) -> Lab:
    program = server_program(unprivileged, server_dir / "bin" / "fake-llama-server", HELPER)
    return Lab(registry_path, server_dir / "state", unprivileged.run_as, program)


# Pins checked at every spawn.


@pytest.fixture
def pin_lab(unprivileged: Unprivileged) -> PinLab:
    """A model of this test's own (it may be tampered with), registered as ``tiny``."""
    return PinLab.create(unprivileged)
