"""The fleet's front door: the run file's ``[front_door]`` served over the fleet's scheduler
(`FleetDoor`), from `open_fleet` on, or from the reload that adds the table.

The address is bound first (`bind_front_door`), before anything else changes: at the start
before any instance is loaded, in a reload before anything is drained or started, so an
address that cannot be had refuses the start or the reload with nothing changed.

Once it listens, ``[front_door]`` cannot change while the supervisor runs: its clients
hold the address, and its key and limits are read once. A reload that changes or removes
the table is refused as needing a restart of ``inferactors run`` (nothing changed), as a
moved ``data_root`` is (`front_door_added`). A reload may add the table when there was
none: it is bound, then served once the reload is applied.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from functools import partial

import trio
from prometheus_client import CollectorRegistry

from .._config.front_door import FrontDoorConfig
from .._config.runfile import Endpoint
from .._errors import InvalidConfig
from .control_token import read_token
from .fleet_door import FleetDoor
from .front_door_metrics import FrontDoorMetrics
from .front_door_server import FrontDoor, listen_front_door, serve_front_door

WHAT = "the front door's port ([front_door])"
"""How the front door's address is named when an instance would take it."""


def front_door_added(
    serving: FrontDoorConfig | None, wanted: FrontDoorConfig | None
) -> FrontDoorConfig | None:
    """The ``[front_door]`` a reload adds (None when it adds none) while ``serving`` is
    served.

    Raises:
        InvalidConfig: the reload changes or removes the table that is served: that needs a
            restart (module docstring).
    """
    if serving is None or wanted == serving:
        return None if serving is not None else wanted
    how = "removes it" if wanted is None else "changes it"
    raise InvalidConfig(
        f"$.front_door: the front door listens on {serving.listen_host()}:{serving.port} "
        f"and this reload {how}; its clients hold that address and its key and limits "
        "are read once, so it cannot change while the supervisor runs: it needs a restart "
        "of inferactors run (nothing changed)"
    )


def bind_front_door(config: FrontDoorConfig) -> socket.socket:
    """A socket listening on ``config``'s address, once its key file reads well.

    Raises:
        InvalidConfig: a bad setting, a bad key file, or an address that cannot be bound.
    """
    if config.api_key_file is not None:
        read_token(config.api_key_file)
    return listen_front_door(config)


async def serve_fleet_front_door(
    nursery: trio.Nursery,
    door: FleetDoor,
    config: FrontDoorConfig,
    listener: socket.socket,
    registry: CollectorRegistry,
    until: Callable[[], Awaitable[None]],
) -> tuple[FrontDoor, Endpoint]:
    """Serve ``config`` on ``listener`` (taken over) in ``nursery`` over ``door`` until
    ``until`` returns, counted in ``registry``; its address, and the `Endpoint` no instance
    may take from now on.

    Raises:
        InvalidConfig: as `serve_front_door`.
    """
    serve = partial(
        serve_front_door,
        metrics=FrontDoorMetrics.create(registry),
        until=until,
        listener=listener,
    )
    served: FrontDoor = await nursery.start(serve, door, config)
    return served, Endpoint(config.listen_host(), served.port, WHAT)
