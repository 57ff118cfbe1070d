"""What the adopted llama.cpp runtime tests share: a fake llama-server seen through httpx.

`FakeLlama` answers by its fields and records every request; `adopted` opens an adopted
llama.cpp runtime whose prober talks to it through ``httpx.MockTransport``, and `chat` is
the spec of a server at `PORT`. `expected_id` is seed-behaviour section 4's instance id
formula, `errors_in` flattens an exception group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import blake3
import httpx
import trio
import trio.testing

from inferactors import (
    Edges,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    ServeArgs,
    http_prober_factory,
    open_runtime,
)

PORT = 8123


@attrs.define(eq=False)
class FakeLlama:
    """A llama-server as seen through httpx: answers by its fields, records every request.

    ``hang`` names a path whose requests are held forever (``entered`` is set when one
    arrives), ``slow`` one whose answers take ``slow_s`` seconds; ``down`` makes every
    request fail to connect.
    """

    health: int = 200
    models: tuple[str, ...] = ("tiny.gguf",)
    models_status: int = 200
    completion: int = 200
    down: bool = False
    hang: str | None = None
    slow: str | None = None
    slow_s: float = 0.0
    entered: trio.Event = attrs.Factory(trio.Event)
    requests: list[httpx.Request] = attrs.Factory(list)

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]

    @property
    def methods(self) -> set[str]:
        return {request.method for request in self.requests}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path == self.hang:
            self.entered.set()
            await trio.sleep_forever()
        if request.url.path == self.slow:
            await trio.sleep(self.slow_s)
        return self._answer(request)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        match (request.method, request.url.path):
            case ("GET", "/health"):
                location = {"Location": "http://127.0.0.1:9/elsewhere"}
                return httpx.Response(self.health, json={"status": "ok"}, headers=location)
            case ("GET", "/v1/models"):
                data = [{"id": name, "object": "model"} for name in self.models]
                return httpx.Response(self.models_status, json={"object": "list", "data": data})
            case ("POST", "/v1/chat/completions"):
                message = {"role": "assistant", "content": " and"}
                choice = {"index": 0, "message": message, "finish_reason": "length"}
                return httpx.Response(self.completion, json={"choices": [choice]})
            case _:
                return httpx.Response(404, json={"error": "not found"})


def chat(port: int = PORT, *, role: str = "chat", model: str | None = "tiny") -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model=model, serve=ServeArgs(port=port)
    )


@attrs.frozen
class QuietNet:
    """Socket tables that show nobody, at once: the real ones read in a worker thread, and
    under MockClock the clock jumps to the next deadline while a thread works, so a monitor
    that scans would probe only once per deadline the test sets."""

    async def scan(self, pid: int, port: int) -> None:
        await trio.lowlevel.checkpoint()

    async def listeners_changed(self, generation: int, deadline: float) -> int:
        await trio.sleep_until(deadline)  # nothing ever listens here: never a change
        return generation

    async def port_owner(self, host: str, port: int) -> None:
        await trio.lowlevel.checkpoint()

    async def tree_owner(self, pid: int, host: str, port: int) -> None:
        await trio.lowlevel.checkpoint()

    def owned_by(self, pid: int | None, group_pgid: int) -> bool:
        return False

    async def listeners_on(self, port: int) -> tuple[()]:
        await trio.lowlevel.checkpoint()
        return ()

    async def port_exposure(self, port: int) -> None:
        await trio.lowlevel.checkpoint()


@asynccontextmanager
async def adopted(
    server: FakeLlama, *, node_id: str = "node1", quiet_net: bool = False, **config: object
) -> AsyncIterator[InferRuntime]:
    """An adopted llama.cpp runtime probing ``server``; ``quiet_net``: through `QuietNet`, so
    its monitor probes on schedule under MockClock. The loop's stalls are not measured:
    MockClock's jumps would read as stalls (`Edges.measure_loop_lag`)."""
    settings = InferConfig.adopted(InferFlavor.LLAMACPP, **config)  # type: ignore[arg-type]
    prober = http_prober_factory(httpx.MockTransport(server.handle))
    edges = Edges(open_prober=prober, measure_loop_lag=False)
    if quiet_net:
        edges = attrs.evolve(edges, net=QuietNet())
    async with open_runtime(settings, node_id=node_id, edges=edges, open_prober=prober) as runtime:
        yield runtime


def expected_id(role: str, model: str, base_url: str, mode: str, node: str) -> str:
    """Seed-behaviour section 4: role-<blake3(role+runtime+model+base_url+mode)[:8]>-node."""
    material = role + "infer.llamacpp" + model + base_url + mode
    return f"{role}-{blake3.blake3(material.encode()).hexdigest()[:8]}-{node}"


def errors_in(error: BaseException) -> list[BaseException]:
    """``error`` and, for an exception group, every leaf inside it."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in errors_in(inner)]
    return [error]
