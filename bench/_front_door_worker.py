"""A proxy in its own process for ``bench_front_door.py``: ``door`` (inferactors' front door
over one always-resident llama-server) or ``bare`` (the baseline: a bare starlette app on
the same hypercorn trio worker that passes every request to the server through one
kept-alive httpx client, streaming the answer back chunk by chunk, with no checks at all).

Run: ``python bench/_front_door_worker.py door|bare PORT UPSTREAM_URL``; it serves on
127.0.0.1:PORT until killed. Not a benchmark itself.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import cast

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inferactors import FrontDoorConfig, InferFlavor, ModelEntry, Residency, Upstream
from inferactors import serve_front_door as serve_door
from inferactors.testing import ResidentScheduler


def bare_app(upstream: str) -> Starlette:
    """The baseline: every path passed on, the answer streamed back as it comes."""
    client = httpx.AsyncClient(base_url=upstream, timeout=None, trust_env=False)

    async def relay(request: Request) -> Response:
        body = await request.body()
        sent = client.build_request(
            request.method,
            request.url.path,
            content=body,
            headers={"content-type": "application/json"},
        )
        answer = await client.send(sent, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        kind = answer.headers.get("content-type", "application/json")
        return StreamingResponse(chunks(), status_code=answer.status_code, media_type=kind)

    return Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])


async def main(mode: str, port: int, upstream: str) -> None:
    if mode == "door":
        entry = ModelEntry("tiny", (), InferFlavor.LLAMACPP, Residency.RESIDENT, False)
        target = Upstream("tiny", InferFlavor.LLAMACPP, upstream, "")
        scheduler = ResidentScheduler([(entry, target)])
        await serve_door(scheduler, FrontDoorConfig(port=port))
        return
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    await serve(cast(ASGIFramework, bare_app(upstream)), config)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
