"""`Fleet.reload` against fake llama-servers (real processes): only what changed is
touched, an invalid run file changes nothing, a held-down instance comes back only by
reload (issue 10 item 3)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import trio

from inferactors import InferactorsError, InvalidConfig
from inferactors._models.registry import ModelRegistry
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors._service.views import Lifecycle, LifecycleNote, ReloadResult
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit, Workspace, write_tiny_gguf
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, running, until


def pids(fleet: Fleet) -> dict[str, int | None]:
    return {view.name: view.status.pid for view in fleet.views()}


async def test_reload_adds_changes_and_removes_and_keeps_the_rest(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    keep, change, drop = (
        Entry("keep", free_port()),
        Entry("change", free_port()),
        Entry("drop", free_port()),
    )
    run.write(keep, change, drop)
    notes: list[LifecycleNote] = []
    async with open_fleet(run.config(), run.path) as fleet:
        fleet.on_lifecycle(notes.append)
        await until(fleet, running("keep", "change", "drop"))
        before = pids(fleet)
        add = Entry("add", free_port())
        run.write(keep, Entry("change", change.port, serve=", ctx = 4096"), add)
        result = await fleet.reload()
        assert result == ReloadResult(
            added=("add",), removed=("drop",), changed=("change",), unchanged=("keep",)
        )
        await until(fleet, running("keep", "change", "add"))
        after = pids(fleet)
        assert [view.name for view in fleet.views()] == ["keep", "change", "add"]
        assert after["keep"] == before["keep"]
        assert after["change"] != before["change"]
        assert before["drop"] is not None
        assert not psutil.pid_exists(before["drop"])
        kinds = [note.kind for note in notes]
        assert kinds[-2:] == [Lifecycle.RELOADING, Lifecycle.RELOADED]
        assert notes[-1].detail == "reloaded: added add; changed change; removed drop; 1 unchanged"


async def test_an_invalid_run_file_on_reload_changes_nothing(inferactors_kit: RuntimeKit) -> None:
    run = RunFile.create(inferactors_kit)
    one, two = Entry("one", free_port()), Entry("two", free_port())
    run.write(one, two)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("one", "two"))
        before = fleet.views()
        # valid TOML, and the first instance is fine: the second's bad port is found first
        run.write(Entry("one", one.port, serve=", ctx = 8192"), Entry("two", 0))
        with pytest.raises(InvalidConfig, match=r"instances\[1\]\.serve\.port must not be 0"):
            await fleet.reload()
        run.path.write_text("[[instances]\n")
        with pytest.raises(InvalidConfig, match="TOML syntax error"):
            await fleet.reload()
        await trio.sleep(0.3)
        assert pids(fleet) == {view.name: view.status.pid for view in before}
        assert [view.status.state for view in fleet.views()] == [InstanceState.RUNNING] * 2


async def test_a_held_down_instance_comes_back_only_by_reload(
    inferactors_workspace: Workspace, tiny_gguf: Path
) -> None:
    """The model written in place while served (the same bytes: only its ctime moves):
    stopped for tampering and held down, refused by a start, revived by a reload."""
    kit = RuntimeKit.create(inferactors_workspace, tiny_gguf)
    own = write_tiny_gguf(kit.root / "own.gguf")  # a model of its own, to write to
    ModelRegistry.open(kit.registry()).add(own, name="own")
    run = RunFile.create(kit)
    run.write(Entry("chat", free_port(), model="own"), Entry("other", free_port()))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat", "other"))
        first, other = pids(fleet)["chat"], pids(fleet)["other"]
        with own.open("r+b") as model:
            byte = model.read(1)
            model.seek(0)
            model.write(byte)
        await until(fleet, lambda f: f.view("chat").status.stop_reason == "tampered")
        await trio.sleep(1.0)  # many restart delays: nothing brings it back
        assert fleet.view("chat").status.state is InstanceState.EXITED
        assert fleet.members["chat"].held_down()
        with pytest.raises(InferactorsError):
            await fleet.start("chat")
        assert fleet.view("chat").status.pid is None

        result = await fleet.reload()
        assert (result.revived, result.unchanged) == (("chat",), ("other",))
        await until(fleet, running("chat"))
        assert pids(fleet)["chat"] not in (None, first)
        assert pids(fleet)["other"] == other
