"""The front door over fake servers, for the tests of ``tests/service/test_front_door_*``.

`fake` starts a fake llama-server or mlx_lm.server playing a `Timeline` (the stream faults
`StreamDies` and `EndlessStream` included) on a free port; `entry_for` makes the
`ModelEntry` and `Upstream` of one; `door` opens a front door on a free loopback port over
a `ResidentScheduler` of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import attrs

from inferactors._actors.front_door_resident import ResidentScheduler
from inferactors._actors.front_door_seam import ModelEntry, Residency, Upstream
from inferactors._config.front_door import FrontDoorConfig
from inferactors._flavor import InferFlavor
from inferactors._service.front_door_server import FrontDoor, open_front_door
from inferactors.testing import FakeServer, Timeline, start_fake_server
from inferactors.testing._fake_faults import Flavor

FLAVORS: dict[Flavor, InferFlavor] = {"llamacpp": InferFlavor.LLAMACPP, "mlx": InferFlavor.MLX_LM}
MLX_MODEL = "/models/tiny-mlx"


@contextmanager
def fake(
    directory: Path, flavor: Flavor = "llamacpp", timeline: Timeline | None = None
) -> Iterator[FakeServer]:
    """A fake server of ``flavor`` playing ``timeline``; killed on exit."""
    model = MLX_MODEL if flavor == "mlx" else "tiny.gguf"
    server = start_fake_server(directory, flavor=flavor, timeline=timeline, model=model)
    try:
        yield server
    finally:
        server.stop()


def entry_for(
    name: str, server: FakeServer, *, aliases: tuple[str, ...] = ()
) -> tuple[ModelEntry, Upstream]:
    """The model ``name`` served by ``server`` (mlx: sent its ``--model``)."""
    flavor = FLAVORS[server.flavor]
    served = server.model if server.flavor == "mlx" else ""
    entry = ModelEntry(name, aliases, flavor, Residency.RESIDENT, on_demand=False)
    return entry, Upstream(name, flavor, server.base_url, served)


@attrs.frozen
class Door:
    """A front door that listens, and the scheduler behind it."""

    door: FrontDoor
    scheduler: ResidentScheduler

    @property
    def url(self) -> str:
        return self.door.url


@asynccontextmanager
async def door(
    *models: tuple[ModelEntry, Upstream], config: FrontDoorConfig | None = None
) -> AsyncIterator[Door]:
    """A front door over ``models``, all resident, on a free loopback port."""
    scheduler = ResidentScheduler(models)
    async with open_front_door(scheduler, config or FrontDoorConfig(port=0)) as opened:
        yield Door(opened, scheduler)


def ended(scheduler: ResidentScheduler) -> None:
    """Every grant was ended, exactly once."""
    assert all(count == 0 for count in scheduler.in_flight.values()), scheduler.in_flight
    assert scheduler.granted == scheduler.finished
