"""An ASGI answer that stops when its client leaves: `cancelled_when_gone`.

An ASGI server tells an app that its client went away only through ``receive()``, which
returns ``http.disconnect``; it does not cancel the app (hypercorn does not). Every
answer that waits or streams (the front door's grant and relay, the web page's event
stream, the ``inferactors ui`` door's relay) runs its work in `cancelled_when_gone`, whose
watcher reads ``receive`` and cancels the work at the disconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio
from starlette.types import Receive


@attrs.define
class ClientWatch:
    """Whether the client left (``gone``) while the block ran."""

    gone: bool = False


@asynccontextmanager
async def cancelled_when_gone(receive: Receive) -> AsyncIterator[ClientWatch]:
    """Run the block; when the client disconnects (ASGI ``http.disconnect``) before it ends,
    the block is cancelled and the `ClientWatch` it was given says ``gone``. The request's
    body must have been read already: the watcher takes every message ``receive`` gives.
    Leaving the block stops the watcher."""
    watch = ClientWatch()
    async with trio.open_nursery() as nursery:

        async def watch_client() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            watch.gone = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_client)
        yield watch
        nursery.cancel_scope.cancel()
