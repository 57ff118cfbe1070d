"""A reload and the front door (fake llama-servers, real processes, a real `Fleet`):

- a reload that adds the first on-demand instance opens the scheduler (no restart of
  ``run``): the reload returns once it is open, and a request starts the new instance;
- a reload that adds ``[front_door]`` serves it (bound before anything changes) on its
  address, which no instance may take from then on;
- a reload that changes or removes the ``[front_door]`` that is served is refused as
  needing a restart, as a moved ``data_root`` is: nothing changed, the door still answers;
- a ``[front_door]`` address that cannot be bound refuses the reload: nothing changed.
"""

from __future__ import annotations

import socket

import httpx
import pytest
import trio

from inferactors import InvalidConfig
from inferactors._actors.front_door_seam import Residency
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, pids, running, until

ON_DEMAND = "residency = { on_demand = true }\n"


def _with_door(run: RunFile, *entries: Entry, port: int) -> None:
    run.write(*entries)
    run.path.write_text(run.path.read_text() + f"\n[front_door]\nport = {port}\n")


async def _models(url: str) -> list[tuple[str, str]]:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0) as client:
        data = (await client.get("/v1/models")).json()["data"]
    return [(model["id"], model["status"]["value"]) for model in data]


def _url(fleet: Fleet) -> str:
    assert fleet.front_door is not None
    return f"http://127.0.0.1:{fleet.front_door.port}"


async def test_a_reload_that_adds_the_first_on_demand_instance_opens_the_scheduler(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    always = Entry("always", free_port())
    run.write(always)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("always"))
        assert fleet.door is None  # nothing wants a scheduler yet
        run.write(always, Entry("lazy", free_port(), extra=ON_DEMAND))
        result = await fleet.reload()
        assert result.added == ("lazy",)
        assert fleet.door is not None
        assert fleet.door.scheduler is not None  # open when the reload returns
        residency = {entry.name: entry.residency for entry in fleet.door.models()}
        assert residency["lazy"] is Residency.NOT_LOADED
        with trio.fail_after(30.0):
            grant = await fleet.door.acquire("lazy")
        await until(fleet, running("lazy"))
        grant.done()
        await fleet.stop("lazy")  # through the scheduler now: drained, reason requested
        assert fleet.view("lazy").status.stop_reason == "requested"


async def test_a_reload_adds_a_front_door_but_never_moves_or_removes_it(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    chat, door_port = Entry("chat", free_port()), free_port()
    run.write(chat)
    said: list[str] = []

    def say(message: str, *, instance: str | None = None, level: int = 0) -> None:
        said.append(message)

    async with open_fleet(run.config(), run.path, say=say) as fleet:
        await until(fleet, running("chat"))
        _with_door(run, chat, port=door_port)
        await fleet.reload()
        assert f"front door listening on http://127.0.0.1:{door_port}" in said
        with trio.fail_after(30.0):
            while await _models(_url(fleet)) != [("chat", "resident")]:  # noqa: ASYNC110  (polls the door)
                await trio.sleep(0.05)
        before = pids(fleet)

        _with_door(run, chat, Entry("more", free_port()), port=free_port())
        with pytest.raises(InvalidConfig) as moved:
            await fleet.reload()
        assert "$.front_door: the front door listens on 127.0.0.1:" in str(moved.value)
        assert "this reload changes it" in str(moved.value)
        assert "needs a restart of inferactors run (nothing changed)" in str(moved.value)
        run.write(chat)
        with pytest.raises(InvalidConfig, match="this reload removes it"):
            await fleet.reload()

        _with_door(run, chat, Entry("thief", door_port), port=door_port)
        with pytest.raises(InvalidConfig, match="is the front door's port"):
            await fleet.reload()  # no instance may take the front door's address
        assert [view.name for view in fleet.views()] == ["chat"]
        assert pids(fleet) == before
        assert await _models(_url(fleet)) == [("chat", "resident")]


async def test_a_front_door_address_that_cannot_be_bound_refuses_the_reload(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    chat = Entry("chat", free_port())
    run.write(chat)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat"))
        before = pids(fleet)
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            taken = holder.getsockname()[1]
            _with_door(run, chat, Entry("added", free_port(), extra=ON_DEMAND), port=taken)
            with pytest.raises(InvalidConfig) as refused:
                await fleet.reload()
        assert f"front door: cannot listen on 127.0.0.1:{taken}" in str(refused.value)
        assert [view.name for view in fleet.views()] == ["chat"]
        assert pids(fleet) == before
        assert fleet.door is None
        assert fleet.front_door is None


async def test_a_reload_with_a_smaller_budget_applies_it_and_evicts_idle_models(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    one, two = (
        Entry("one", free_port(), extra=ON_DEMAND),
        Entry("two", free_port(), extra=ON_DEMAND),
    )
    run.write(one, two)
    original = run.path.read_text()
    run.path.write_text(original + "\n[residency]\nbudget = 100000000000\n")
    async with open_fleet(run.config(), run.path) as fleet:
        assert fleet.door is not None
        for name in ("one", "two"):
            with trio.fail_after(30.0):
                grant = await fleet.door.acquire(name)
            grant.done()
        await until(fleet, running("one"))
        await until(fleet, running("two"))
        run.path.write_text(original + "\n[residency]\nbudget = 1\n")  # holds neither
        result = await fleet.reload()
        assert result.applied == ("residency",)
        assert result.unchanged == ("one", "two")
        await until(
            fleet,
            lambda f: all(f.view(n).status.stop_reason == "evicted" for n in ("one", "two")),
        )
        assert {e.residency for e in fleet.door.models()} == {Residency.NOT_LOADED}
        again = await fleet.reload()  # the same file again: nothing to apply
        assert again.applied == ()
