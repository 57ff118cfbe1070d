"""Serving the front door: hypercorn's trio worker on one TCP address, as the control API.

`serve_front_door` serves until cancelled (trio's ``serve_*`` style: ``await
nursery.start(serve_front_door, scheduler, config)`` returns its URL once it listens);
`open_front_door` is the same as an async context manager that yields a `FrontDoor`.
Both keep one kept-alive HTTP client per server (`inferactors._edges.upstream`) and close
them when they stop.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import cast

import attrs
import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.typing import ASGIFramework
from hypercorn.utils import wrap_app

from .._actors.front_door_seam import Scheduler
from .._config.front_door import FrontDoorConfig
from .._edges.upstream import UpstreamClients
from .._errors import InvalidConfig
from .control_server import BACKLOG, NoBanner
from .control_token import read_token
from .front_door_app import FrontDoorLimits, front_door_app
from .front_door_body import BodyLimits
from .front_door_intake import IntakeLimits
from .front_door_metrics import FrontDoorMetrics

GRACE_S = 1.0
"""How long requests under way may take once the front door was told to stop, float
seconds (a stream still running then is cut; its client sees the connection end)."""

HELD_BODIES = 8
"""The request bodies being read at once hold at most this many times ``max_body_bytes``
together (``_service/front_door_intake.py``)."""

log = logging.getLogger("inferactors.front_door")
log.addFilter(NoBanner())


@attrs.frozen
class FrontDoor:
    """A front door that listens (made by `open_front_door`).

    Attributes:
        url: where it listens, ``http://127.0.0.1:PORT`` (``http://[::1]:PORT``); the
            OpenAI base URL is ``url + "/v1"``, Ollama's host is ``url``.
        port: its TCP port.
    """

    url: str
    port: int


def listen_front_door(config: FrontDoorConfig) -> socket.socket:
    """A socket listening on ``config``'s address, for `serve_front_door` (``listener``):
    bound before anything else changes, so an address that cannot be had is refused first.

    Raises:
        InvalidConfig: as `FrontDoorConfig.validate`, or the address cannot be bound.
    """
    config.validate("front door")
    host = config.listen_host()
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, config.port))
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        raise InvalidConfig(
            f"front door: cannot listen on {host}:{config.port}: {error.strerror or error}"
        ) from None
    return sock


def _hypercorn_config() -> Config:
    config = Config()
    config.errorlog = log
    config.accesslog = None
    config.graceful_timeout = GRACE_S
    return config


def _url(sock: socket.socket) -> tuple[str, int]:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}", int(port)


async def serve_front_door(
    scheduler: Scheduler,
    config: FrontDoorConfig,
    *,
    metrics: FrontDoorMetrics | None = None,
    until: Callable[[], Awaitable[None]] | None = None,
    listener: socket.socket | None = None,
    task_status: trio.TaskStatus[FrontDoor] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the front door over ``scheduler`` until cancelled, or until ``until`` returns
    (the requests under way then get `GRACE_S` to finish).

    Args:
        scheduler: grants each request an instance (``_actors/front_door_seam.py``).
        config: where it listens, its key, its limits (`FrontDoorConfig`).
        metrics: where requests are counted and timed (`FrontDoorMetrics`), if anywhere.
        until: when it returns, stop taking connections and return.
        listener: a socket already listening on ``config``'s address (`listen_front_door`),
            taken over (closed when it stops); None: bound here.
        task_status: started with the `FrontDoor` once it listens.

    Raises:
        InvalidConfig: a bad setting (as `FrontDoorConfig.validate`), an address that
            cannot be bound, or a bad key file (`control_token.read_token`'s rules).

    Cancellation stops it at once: open streams are cut, and each server's stream is
    closed (so it stops generating) and its grant ended.
    """
    try:
        api_key = (
            None
            if config.api_key_file is None
            else read_token(config.api_key_file, "front door API key file")
        )
        listener = listener or listen_front_door(config)
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    clients = UpstreamClients(
        connect_timeout_s=config.connect_timeout_s, read_timeout_s=config.read_timeout_s
    )
    limits = FrontDoorLimits(
        body=BodyLimits(config.max_body_bytes, config.body_timeout_s, config.body_idle_timeout_s),
        intake=IntakeLimits(
            bodies=config.bodies_at_once, held_bytes=HELD_BODIES * config.max_body_bytes
        ),
    )
    try:
        hyper = _hypercorn_config()
        asgi = cast(
            ASGIFramework,
            front_door_app(
                scheduler,
                clients=clients,
                limits=limits,
                api_key=api_key,
                metrics=metrics,
                loopback_only=config.loopback(),
            ),
        )
        app = wrap_app(asgi, hyper.wsgi_max_body_size, "asgi")
        sockets = Sockets(secure_sockets=[], insecure_sockets=[listener], quic_sockets=[])
        url, port = _url(listener)

        async def serve(
            *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
        ) -> None:
            await worker_serve(
                app, hyper, sockets=sockets, shutdown_trigger=until, task_status=task_status
            )

        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            task_status.started(FrontDoor(url, port))
    finally:
        listener.close()
        with trio.CancelScope(shield=True):
            await clients.aclose()


@asynccontextmanager
async def open_front_door(
    scheduler: Scheduler, config: FrontDoorConfig, *, metrics: FrontDoorMetrics | None = None
) -> AsyncIterator[FrontDoor]:
    """`serve_front_door` for the duration of an ``async with`` block: yields the
    `FrontDoor` once it listens; leaving the block stops it (requests under way are cut).

    Raises:
        InvalidConfig: as `serve_front_door`.
    """
    async with trio.open_nursery() as nursery:
        serve = partial(serve_front_door, metrics=metrics)
        door: FrontDoor = await nursery.start(serve, scheduler, config)
        try:
            yield door
        finally:
            nursery.cancel_scope.cancel()
