"""inferactors' pytest plugin: fake servers with faults, tiny models, a managed runtime.

Installed with ``pip install -e '/path/to/clone[testing]'`` and loaded by pytest through the
``pytest11`` entry point (nothing to import or list in a conftest). Loading it imports
nothing but pytest: each fixture imports what it needs when a test first asks for it, so a
run that uses none of them starts as fast as without the plugin. ``pytest --fixtures``
lists its fixtures:

- ``fake_llama_server``, ``fake_mlx_server``, ``fake_ollama``: a fake llama-server,
  mlx_lm.server or Ollama, each a real process on a free 127.0.0.1 port, with ``base_url``,
  ``port``, ``pid``, ``stop()`` and ``restart(timeline)``;
- ``inferactors_fakes``: starts more of them, each with its own timeline;
- ``tiny_gguf``, ``tiny_mlx_model``: the tiny models real servers load (session-wide);
- ``inferactors_workspace``: where and as whom managed servers run (``nobody`` as root);
- ``inferactors_kit`` and ``inferactors_runtime``: a managed runtime on a temporary state
  directory (the runtime fixture is async: run the test under trio with pytest-trio,
  ``@pytest.mark.trio`` or ``trio_mode = true``).

The faults a fixture's fake plays come from the test's ``inferactors_faults`` marker: steps,
a `Timeline`, a field case id, or timeline data (``{"steps": [...]}``). When a test uses
several fakes, each plays the steps it can; a step none of them can play is an error that
names the fixture that would::

    @pytest.mark.inferactors_faults(Status503(for_s=1.0), CrashAt(request=3))
    def test_retries(fake_llama_server): ...

    @pytest.mark.inferactors_faults("FC-19")
    def test_load_timeout(fake_ollama): ...
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

if typing.TYPE_CHECKING:
    from .._actors.runtime import InferRuntime
    from ._fake_faults import Flavor
    from ._fake_processes import FakeOllamaServer, FakeServer
    from ._runtime_kit import RuntimeKit
    from ._timeline import FakeKind, Timeline
    from ._workspace import Workspace

MARKER = "inferactors_faults"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``inferactors_faults`` marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*steps): the faults inferactors' fake servers play in this test: "
        "steps (Status503(for_s=5.0), CrashAt(request=3), ...), a Timeline, a field case "
        'id ("FC-07") or timeline data ({"steps": [...]}); with several fake fixtures, each '
        "plays the steps it can",
    )


def marked_timeline(node: pytest.Item | pytest.Collector | Any) -> Timeline:
    """The timeline of the closest ``inferactors_faults`` marker, or an empty one. Its
    arguments are steps, `Timeline` values, field case ids and timelines as data (a mapping
    ``{"steps": [...]}``, read by `timeline_from_data`). Raises InvalidConfig for bad data
    or steps that contradict."""
    from ._field_cases import field_case
    from ._timeline import Timeline
    from ._timeline_data import timeline_from_data

    marker = node.get_closest_marker(MARKER) if node is not None else None
    if marker is None:
        return Timeline()
    steps: list[Any] = []
    for arg in marker.args:
        if isinstance(arg, str):
            steps.extend(field_case(arg).steps)
        elif isinstance(arg, Timeline):
            steps.extend(arg.steps)
        elif isinstance(arg, Mapping):
            steps.extend(timeline_from_data(arg).steps)
        else:
            steps.append(arg)
    return Timeline(tuple(steps))


PLAYERS: dict[str, FakeKind] = {
    "fake_llama_server": "llamacpp",
    "fake_mlx_server": "mlx",
    "fake_ollama": "ollama",
    "inferactors_runtime": "llamacpp",
}
"""The fixtures that play the marker, and the fake each one runs."""

_FIXTURE_OF: dict[FakeKind, str] = {"llamacpp": "fake_llama_server", "mlx": "fake_mlx_server"}
_FIXTURE_OF["ollama"] = "fake_ollama"


def timeline_for(request: pytest.FixtureRequest, kind: FakeKind) -> Timeline:
    """The steps of the test's marker that the fake of ``kind`` plays. In a test with more
    than one fake fixture, each plays the steps it can (`LoadTimeout` goes to
    ``fake_ollama``, `Status503` to ``fake_llama_server``). Raises InvalidConfig naming a
    step that no fixture of the test can play, and the fixture that would."""
    from .._errors import InvalidConfig
    from ._timeline import players

    timeline = marked_timeline(request.node)
    used = {PLAYERS[name] for name in request.fixturenames if name in PLAYERS}
    for step in timeline.steps:
        if not used & set(players(step)):
            mine = ", ".join(sorted(n for n in request.fixturenames if n in PLAYERS))
            wanted = " or ".join(_FIXTURE_OF[kind] for kind in players(step))
            raise InvalidConfig(
                f"{MARKER}: {step!r} is played by {wanted}, which this test does not use "
                f"(it uses {mine}): request {wanted} instead"
            )
    return timeline.played_by(kind)


class Fakes:
    """Starts fake servers for one test, each playing its own timeline; all stop after it.

    Each returned fake has ``base_url``, ``port``, ``pid``, ``stop()`` and ``restart()``.
    Raises InvalidConfig for a step the chosen fake cannot play, FakeStartError if it does
    not listen within 30 s.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[FakeServer | FakeOllamaServer] = []

    def llama(self, timeline: Timeline | None = None, *, model: str = "tiny.gguf") -> FakeServer:
        """A fake llama-server playing ``timeline``."""
        return self._server("llamacpp", timeline, model)

    def mlx(self, timeline: Timeline | None = None, *, model: str = "tiny-mlx") -> FakeServer:
        """A fake mlx_lm.server (0.32.2) playing ``timeline``, serving ``model``."""
        return self._server("mlx", timeline, model)

    def ollama(
        self, timeline: Timeline | None = None, *, models: tuple[str, ...] = ("tiny:latest",)
    ) -> FakeOllamaServer:
        """A fake Ollama with ``models`` pulled, playing ``timeline``."""
        from ._fake_processes import start_fake_ollama

        fake = start_fake_ollama(timeline=timeline, models=models)
        self.started.append(fake)
        return fake

    def stop_all(self) -> None:
        """Stop every fake started (their process groups are killed)."""
        for fake in self.started:
            fake.stop()

    def _server(self, flavor: Flavor, timeline: Timeline | None, model: str) -> FakeServer:
        from ._fake_processes import start_fake_server

        directory = self.root / f"{flavor}-{len(self.started)}"
        fake = start_fake_server(directory, flavor=flavor, timeline=timeline, model=model)
        self.started.append(fake)
        return fake


@pytest.fixture
def inferactors_fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakes]:
    """Starts fake servers, each with its own timeline: ``inferactors_fakes.llama(t)``,
    ``.mlx(t)``, ``.ollama(t)``; every one is killed after the test."""
    fakes = Fakes(tmp_path_factory.mktemp("fakes"))
    try:
        yield fakes
    finally:
        fakes.stop_all()


@pytest.fixture
def fake_llama_server(inferactors_fakes: Fakes, request: pytest.FixtureRequest) -> FakeServer:
    """A fake llama-server, a real process on a free 127.0.0.1 port, playing the test's
    ``inferactors_faults`` marker. Has ``base_url``, ``port``, ``pid``, ``requests()``,
    ``stop()`` and ``restart(timeline)``; killed after the test."""
    return inferactors_fakes.llama(timeline_for(request, "llamacpp"))


@pytest.fixture
def fake_mlx_server(inferactors_fakes: Fakes, request: pytest.FixtureRequest) -> FakeServer:
    """A fake mlx_lm.server (0.32.2) serving ``tiny-mlx``, as `fake_llama_server`."""
    return inferactors_fakes.mlx(timeline_for(request, "mlx"))


@pytest.fixture
def fake_ollama(inferactors_fakes: Fakes, request: pytest.FixtureRequest) -> FakeOllamaServer:
    """A fake Ollama daemon with ``tiny:latest`` pulled, a real process on a free 127.0.0.1
    port, playing the test's ``inferactors_faults`` marker (`LoadTimeout`, `SlowLoad`,
    `UnloadLingers`, `ForeignModelLoaded`, `ForeignKeepAlive`). Has ``base_url``, ``port``,
    ``pid``, ``foreign_keep_alive(model, keep_alive)``, ``stop()``, ``restart(timeline)``."""
    return inferactors_fakes.ollama(timeline_for(request, "ollama"))


@pytest.fixture(scope="session")
def inferactors_workspace() -> Iterator[Workspace]:
    """The session's workspace: a world-readable directory under /tmp, and as root the
    unprivileged user (``nobody``) managed servers run as, with an interpreter it can run."""
    from ._workspace import Workspace

    workspace = Workspace.create()
    try:
        yield workspace
    finally:
        workspace.remove()


@pytest.fixture(scope="session")
def tiny_gguf(inferactors_workspace: Workspace) -> Path:
    """The tiny deterministic llama GGUF (522,336 bytes) that the real llama-server loads in
    well under a second, written once per session where managed servers can read it."""
    from ._tiny_models import write_tiny_gguf

    return write_tiny_gguf(inferactors_workspace.directory("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_mlx_model(inferactors_workspace: Workspace) -> Path:
    """The tiny deterministic mlx model directory (about 520 KB) that the real
    mlx_lm.server loads offline, every file readable by all, written once per session."""
    from ._tiny_mlx import write_tiny_mlx

    written = write_tiny_mlx(inferactors_workspace.directory("mlx-model").resolve() / "tiny")
    written.chmod(0o755)
    for path in written.iterdir():
        path.chmod(0o644)
    return written


@pytest.fixture
def inferactors_kit(inferactors_workspace: Workspace, tiny_gguf: Path) -> RuntimeKit:
    """Material for a managed runtime: ``registry()`` (the tiny GGUF as ``"tiny"``),
    ``fake_program(timeline)``, ``config(timeline)``, ``spec(role)``, and
    ``runtime(timeline)``, an async context manager that opens a runtime."""
    from ._runtime_kit import RuntimeKit

    return RuntimeKit.create(inferactors_workspace, tiny_gguf)


@pytest.fixture
async def inferactors_runtime(
    inferactors_kit: RuntimeKit, request: pytest.FixtureRequest
) -> AsyncIterator[InferRuntime]:
    """An open runtime on a temporary state directory managing fake llama-servers that play
    the test's ``inferactors_faults`` marker; load ``inferactors_kit.spec()``. Async: the
    test must run under trio (pytest-trio: ``@pytest.mark.trio`` or ``trio_mode = true``).
    Every server is stopped after the test."""
    async with inferactors_kit.runtime(timeline_for(request, "llamacpp")) as runtime:
        yield runtime
