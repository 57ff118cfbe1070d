"""Before the fleet's scheduler opens (every first load of the run not over yet), the front
door tells the truth and bounds the wait: its model lists show each instance of the run
file as ``starting`` (an on-demand one ``not-loaded``), not an empty list; a request waits
for the opening at most its ``max_wait_s``, then gets a 503 ``wait-timeout`` with
``Retry-After`` in its dialect; an unknown model is a 404 naming the run file's models."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import attrs
import httpx
import trio

from inferactors._actors.front_door_seam import Residency
from inferactors._config.front_door import FrontDoorConfig
from inferactors._config.residency import ResidencySection
from inferactors._edges.memory_gauge import PsutilGauge
from inferactors._errors import RefusalKind
from inferactors._events import Event, QueuedRequestRefused
from inferactors._policy.reload_plan import placements
from inferactors._service.fleet_door import FleetDoor
from inferactors._service.front_door_server import open_front_door
from inferactors._service.hosts import RuntimeHost
from inferactors._service.members import Member
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile

MAX_WAIT_S = 0.5
ON_DEMAND = "residency = { on_demand = true }\n"
ASK = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@attrs.define
class Loading:
    """A fleet whose first loads are not over (what the door reads of it)."""

    members: dict[str, Member]
    stop_grace_s: float = 1.0
    events: list[Event] = attrs.Factory(list)

    def on_event(self, event: Event) -> None:
        self.events.append(event)


@attrs.define
class Heard:
    refusals: list[tuple[str | None, RefusalKind]] = attrs.Factory(list)

    def granted(self, name: str, waited_s: float) -> None:
        raise AssertionError("nothing is granted before the scheduler opens")

    def refused(self, name: str | None, kind: RefusalKind) -> None:
        self.refusals.append((name, kind))


def _loading(kit: RuntimeKit) -> Loading:
    run = RunFile.create(kit)
    run.write(Entry("chat", free_port()), Entry("writer", free_port(), extra=ON_DEMAND))
    host = cast(RuntimeHost, None)  # never used before the first load is over
    members = {
        name: Member(name, placement, host) for name, placement in placements(run.config()).items()
    }
    return Loading(members)


@asynccontextmanager
async def _door(kit: RuntimeKit) -> AsyncIterator[tuple[str, FleetDoor, Loading, Heard]]:
    fleet, heard = _loading(kit), Heard()
    section = ResidencySection(max_wait_s=MAX_WAIT_S, retry_after_s=2.0)
    door = FleetDoor(section, PsutilGauge(), 1.0, fleet, heard)
    async with open_front_door(door, FrontDoorConfig(port=0)) as served:
        yield served.url, door, fleet, heard


async def test_the_model_lists_say_starting_before_the_scheduler_opens(
    inferactors_kit: RuntimeKit,
) -> None:
    async with _door(inferactors_kit) as (url, door, _, _):
        assert [(e.name, e.residency) for e in door.models()] == [
            ("chat", Residency.STARTING),
            ("writer", Residency.NOT_LOADED),  # on demand: nothing starts it yet
        ]
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            models = (await client.get("/v1/models")).json()["data"]
            tags = (await client.get("/api/tags")).json()["models"]
            ps = (await client.get("/api/ps")).json()["models"]
    assert [(m["id"], m["status"]["value"], m["on_demand"]) for m in models] == [
        ("chat", "starting", False),
        ("writer", "not-loaded", True),
    ]
    assert [(m["name"], m["residency"]) for m in tags] == [
        ("chat", "starting"),
        ("writer", "not-loaded"),
    ]
    assert ps == []  # nothing is in memory yet


async def test_a_request_waits_for_the_opening_at_most_its_max_wait(
    inferactors_kit: RuntimeKit,
) -> None:
    async with (
        _door(inferactors_kit) as (url, _, fleet, heard),
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0) as client,
    ):
        began = trio.current_time()
        answer = await client.post("/v1/chat/completions", json=ASK)
        waited = trio.current_time() - began
        unknown = await client.post("/api/chat", json={**ASK, "model": "ghost"})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "2"
    error = answer.json()["error"]
    assert "first loads of the run" in error["message"]
    assert MAX_WAIT_S <= waited < MAX_WAIT_S + 2.0
    assert heard.refusals == [("chat", RefusalKind.WAIT_TIMEOUT)]
    assert not [e for e in fleet.events if isinstance(e, QueuedRequestRefused)]  # no id yet
    assert unknown.status_code == 404
    assert unknown.json()["error"] == (
        'model \'ghost\' not found; the models here are: "chat", "writer"'
    )


async def test_a_closed_door_lists_nothing(inferactors_kit: RuntimeKit) -> None:
    fleet = _loading(inferactors_kit)
    door = FleetDoor(ResidencySection(max_wait_s=math.inf), PsutilGauge(), 1.0, fleet, Heard())
    door.opened.set()  # it could not open (or closed): the scheduler is gone
    assert door.models() == ()
