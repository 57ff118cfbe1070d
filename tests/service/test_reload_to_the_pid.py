"""A reload is a diff to the pid (issue 18 item 1): an instance keeps its process unless its
own effective settings changed; an Ollama model is unloaded only when its instance is
removed or changed; the state directory cannot move while the supervisor runs; a changed
or removed instance is drained (the front door's hook) before it is stopped.

Real processes: fake llama-servers from the kit and the kit's fake Ollama, behind a real
`Fleet`; pids compared before and after.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import psutil
import pytest
import trio

from inferactors import InvalidConfig
from inferactors._config.runfile import Endpoint
from inferactors._models.registry import ModelRegistry
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, pids, running, until


@attrs.define
class OllamaRun:
    """A run file with llama-servers and one managed Ollama model (``notes``)."""

    run: RunFile
    fake: FakeOllama
    managed_extra: str = ""

    notes_extra: str = ""

    def write(self, *entries: Entry) -> None:
        self.run.write(*entries)
        entry = Entry("notes", self.fake.port, model="tiny-ollama", extra=self.notes_extra)
        notes = entry.toml().replace('"infer.llamacpp"', '"infer.ollama"')
        text = self.run.path.read_text().replace(
            "[managed.restart]", f"{self.managed_extra}[managed.restart]"
        )
        self.run.path.write_text(text + notes)

    def unloads(self) -> int:
        return sum(
            1
            for request in self.fake.requests
            if request.path == "/api/generate"
            and isinstance(request.json, dict)
            and request.json.get("keep_alive") == 0
        )


@asynccontextmanager
async def ollama_run(kit: RuntimeKit) -> AsyncIterator[OllamaRun]:
    ModelRegistry.open(kit.registry()).add_ollama("tiny-ollama", "tiny:latest")
    async with open_fake_ollama(models=("tiny:latest",)) as fake:
        yield OllamaRun(RunFile.create(kit), fake)


def resident(fleet: Fleet) -> bool:
    return fleet.view("notes").status.state is InstanceState.RUNNING


async def test_one_changed_spec_restarts_only_that_instance(inferactors_kit: RuntimeKit) -> None:
    async with ollama_run(inferactors_kit) as setup:
        a, b, c = (Entry(name, free_port()) for name in "abc")
        setup.write(a, b, c)
        async with open_fleet(setup.run.config(), setup.run.path) as fleet:
            await until(fleet, lambda f: running("a", "b", "c")(f) and resident(f))
            before = pids(fleet)
            setup.write(a, Entry("b", b.port, serve=", ctx = 4096"), c)
            result = await fleet.reload()
            assert (result.changed, result.unchanged) == (("b",), ("a", "c", "notes"))
            await until(fleet, running("a", "b", "c"))
            after = pids(fleet)
            assert (after["a"], after["c"]) == (before["a"], before["c"])
            assert after["b"] not in (None, before["b"])
            assert setup.unloads() == 0
            assert resident(fleet)


async def test_a_managed_setting_restarts_only_the_instances_it_reaches(
    inferactors_kit: RuntimeKit,
) -> None:
    """``keep_alive`` reaches the Ollama model only (one unload, one load); ``restart``
    reaches the instances that take the default, not those with their own."""
    async with ollama_run(inferactors_kit) as setup:
        own = "supervision = { restart = { max_restarts = 5 } }\n"
        setup.notes_extra = own
        a, b = Entry("a", free_port()), Entry("own", free_port(), extra=own)
        setup.write(a, b)
        async with open_fleet(setup.run.config(), setup.run.path) as fleet:
            await until(fleet, lambda f: running("a", "own")(f) and resident(f))
            before = pids(fleet)
            setup.managed_extra = 'keep_alive = "45m"\n'
            setup.write(a, b)
            result = await fleet.reload()
            assert (result.changed, result.unchanged) == (("notes",), ("a", "own"))
            await until(fleet, resident)
            assert pids(fleet) == before
            assert setup.unloads() == 1
            setup.run.restart = setup.run.restart.replace("max_restarts = 2", "max_restarts = 3")
            setup.write(a, b)
            result = await fleet.reload()
            assert (result.changed, result.unchanged) == (("a",), ("notes", "own"))
            await until(fleet, running("a", "own"))
            after = pids(fleet)
            assert after["own"] == before["own"]
            assert after["a"] not in (None, before["a"])
            assert setup.unloads() == 1  # the Ollama model was not touched again
            assert len(fleet.hosts) == 3  # llama (both settings: one runs own), ollama
            setup.write(Entry("a", a.port, serve=", ctx = 4096"), Entry("own", b.port))
            await fleet.reload()  # "own" now takes the default: it moves to the new runtime
            await until(fleet, running("a", "own"))
            assert len(fleet.hosts) == 2  # the runtime nobody runs in any more is closed


async def test_a_state_directory_change_needs_a_restart_and_changes_nothing(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    a = Entry("a", free_port())
    run.write(a)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("a"))
        before = pids(fleet)
        text = run.path.read_text()
        run.path.write_text(text.replace('/state"', '/elsewhere"'))
        with pytest.raises(InvalidConfig) as refused:
            await fleet.reload()
        message = str(refused.value)
        assert "$.managed.data_root: the state directory would move from" in message
        assert "needs a restart of inferactors run (nothing changed)" in message
        assert pids(fleet) == before
        assert not (inferactors_kit.root / "elsewhere").exists()


async def test_a_reload_onto_a_reserved_address_is_refused(inferactors_kit: RuntimeKit) -> None:
    run = RunFile.create(inferactors_kit)
    control = free_port()
    run.write(Entry("a", free_port()))
    reserved = (Endpoint("127.0.0.1", control, "the control API's port (--control-port)"),)
    async with open_fleet(run.config(), run.path, reserved=reserved) as fleet:
        await until(fleet, running("a"))
        run.write(Entry("a", control))
        with pytest.raises(InvalidConfig, match=r"instances\[0\]\.serve\.port: \d+ on 127"):
            await fleet.reload()


@attrs.define
class RecordingDrainer:
    """A front door stand-in: records each drain with the pids alive at that moment."""

    fleet: Fleet | None = None
    drained: list[tuple[str, bool]] = attrs.Factory(list)

    async def drain(self, name: str, deadline_s: float) -> None:
        assert self.fleet is not None
        pid = self.fleet.view(name).status.pid
        self.drained.append((name, pid is not None and psutil.pid_exists(pid)))
        await trio.sleep(0.1)  # a request finishing


async def test_changed_and_removed_instances_are_drained_before_their_stop(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    keep, change, drop = (Entry(name, free_port()) for name in ("keep", "change", "drop"))
    run.write(keep, change, drop)
    async with open_fleet(run.config(), run.path) as fleet:
        drainer = RecordingDrainer(fleet)
        fleet.drainer = drainer
        await until(fleet, running("keep", "change", "drop"))
        run.write(keep, Entry("change", change.port, serve=", ctx = 4096"))
        await fleet.reload()
        assert sorted(drainer.drained) == [("change", True), ("drop", True)]


async def test_a_follower_of_a_removed_instance_ends_and_one_of_a_kept_one_goes_on(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    a, b = Entry("a", free_port()), Entry("b", free_port())
    run.write(a, b)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("a", "b"))
        with fleet.follow_logs("b") as gone, fleet.follow_logs("a") as kept:
            run.write(a)
            assert (await fleet.reload()).removed == ("b",)
            with trio.fail_after(5.0):
                async for _ in gone:  # what b wrote while it stopped, then the end
                    pass
            with pytest.raises(trio.WouldBlock):
                kept.receive_nowait()  # open: nothing new, and not ended
