"""Run files for Fleet tests: managed instances served by fake llama-servers (the kit's
drop-in ``serve_program``), adopted ones pointed at a port, written as TOML."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from inferactors._config.convert import load_run_config
from inferactors._config.runfile import RunConfig
from inferactors._service.fleet import Fleet
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit, Timeline
from support import run_as_line

WAIT_S = 30.0


@attrs.frozen
class Entry:
    """One ``[[instances]]`` table."""

    role: str
    port: int
    mode: str = "managed"
    extra: str = ""
    serve: str = ""
    model: str = "tiny"

    def toml(self) -> str:
        model = f'model = "{self.model}"\n' if self.mode == "managed" else ""
        serve = f"serve = {{ port = {self.port}{self.serve} }}\n"
        return (
            f'\n[[instances]]\nmode = "{self.mode}"\nrole = "{self.role}"\n'
            f'runtime = "infer.llamacpp"\n{model}{self.extra}{serve}'
        )


@attrs.define
class RunFile:
    """A run file at ``path`` managing fake llama-servers from ``kit``."""

    kit: RuntimeKit
    path: Path
    program: Path
    node_id: str = "fleet"
    restart: str = "max_restarts = 2\nbase_s = 0.2\ncap_s = 0.4\njitter = 0.0"
    managed: str = ""
    """More lines of ``[managed]`` (``trust_anchors = [...]``)."""

    @classmethod
    def create(cls, kit: RuntimeKit, timeline: Timeline | None = None) -> RunFile:
        return cls(kit, kit.root / "run.toml", kit.fake_program(timeline))

    def write(self, *entries: Entry, program: Path | None = None) -> Path:
        run_as = run_as_line(self.kit.workspace.run_as)
        text = (
            f'node_id = "{self.node_id}"\n[managed]\nregistry = "{self.kit.registry()}"\n'
            f'data_root = "{self.kit.root / "state"}"\n{run_as}'
            f'serve_programs = {{ "infer.llamacpp" = "{program or self.program}" }}\n'
            f"readiness_timeout_s = 30.0\n{self.managed}\n[managed.restart]\n{self.restart}\n"
        )
        self.path.write_text(text + "".join(entry.toml() for entry in entries))
        return self.path

    def config(self) -> RunConfig:
        return load_run_config(self.path)


Check = Callable[[Fleet], bool]


async def until(fleet: Fleet, check: Check, within_s: float = WAIT_S) -> None:
    """Wait (polling the cached views, 20 ms apart) until ``check(fleet)`` holds."""
    with trio.fail_after(within_s):
        while not check(fleet):  # noqa: ASYNC110  (a test polls the cache it checks)
            await trio.sleep(0.02)


def running(*names: str) -> Check:
    """A check: every named instance is Running with a pid."""

    def check(fleet: Fleet) -> bool:
        views = {view.name: view for view in fleet.views()}
        return all(
            name in views
            and views[name].status.state is InstanceState.RUNNING
            and views[name].status.pid is not None
            for name in names
        )

    return check


@attrs.define
class Recorder:
    """A `Notifier` that keeps (trio time, fields) of every notification."""

    sent: list[tuple[float, dict[str, str | int]]] = attrs.Factory(list)

    def notify(self, **fields: str | int) -> bool:
        self.sent.append((trio.current_time(), fields))
        return True

    def times_of(self, key: str) -> list[float]:
        return [at for at, fields in self.sent if key in fields]


def pids(fleet: Fleet) -> dict[str, int | None]:
    """Each instance's pid, by name."""
    return {view.name: view.status.pid for view in fleet.views()}
