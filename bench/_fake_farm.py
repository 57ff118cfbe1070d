"""N fake llama-servers on loopback in ONE process (trio + h11), each answering at once.

``python bench/_fake_farm.py N`` listens on N ephemeral ports of 127.0.0.1 and prints
``{"ports": [...]}``. Each port answers like a healthy llama-server serving ``tiny``:
``GET /health`` 200 ``{"status":"ok"}``, ``GET /v1/models`` the list, anything else 404;
connections are kept alive when the client asks (HTTP/1.1), closed when it says so.

Commands on stdin (one a line), each answered with one JSON line on stdout:

* ``start``: forget the counts and start a window;
* ``stop``: for the window, ``{"seconds": its length, "health": [GET /health count per
  port, in port order], "hz": [probes per second per port (`Counts.rate`)], "requests":
  all requests, "connections": connections accepted, "paths": requests per target}``.

EOF on stdin ends it. Its own CPU is not part of any figure (the benchmark prints it).
"""

from __future__ import annotations

import json
import resource
import sys
from functools import partial

import attrs
import h11
import trio
from _child import read_commands, say

HEALTH = json.dumps({"status": "ok"}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
NOT_FOUND = json.dumps({"error": {"code": 404, "message": "File Not Found"}}).encode()
BODIES = {"/health": HEALTH, "/v1/models": MODELS}


@attrs.define
class Counts:
    """Requests seen since the window started."""

    ports: list[int]
    started: float = 0.0
    health: dict[int, int] = attrs.Factory(dict)
    first: dict[int, float] = attrs.Factory(dict)
    last: dict[int, float] = attrs.Factory(dict)
    requests: int = 0
    connections: int = 0
    paths: dict[str, int] = attrs.Factory(dict)

    def start(self) -> None:
        self.started = trio.current_time()
        self.health = dict.fromkeys(self.ports, 0)
        self.first, self.last = {}, {}
        self.requests = self.connections = 0
        self.paths = {}

    def seen(self, port: int) -> None:
        """One ``GET /health`` on ``port``."""
        now = trio.current_time()
        self.health[port] = self.health.get(port, 0) + 1
        self.first.setdefault(port, now)
        self.last[port] = now

    def rate(self, port: int) -> float:
        """``port``'s probes per second: over the intervals between its first and last
        ``GET /health`` of the window when it had three or more, else count / window."""
        count = self.health.get(port, 0)
        if count >= 3 and self.last[port] > self.first[port]:
            return (count - 1) / (self.last[port] - self.first[port])
        return count / max(trio.current_time() - self.started, 1e-9)

    def report(self) -> dict[str, object]:
        return {
            "seconds": trio.current_time() - self.started,
            "health": [self.health.get(port, 0) for port in self.ports],
            "hz": [self.rate(port) for port in self.ports],
            "requests": self.requests,
            "connections": self.connections,
            "paths": self.paths,
        }


async def serve(counts: Counts, port: int, stream: trio.SocketStream) -> None:
    """Answer requests on one connection until either side closes it."""
    counts.connections += 1
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                await answer(conn, stream, event.target.decode().split("?")[0])
                counts.requests += 1
                path = event.target.decode(errors="replace")
                counts.paths[path] = counts.paths.get(path, 0) + 1
                if event.target == b"/health":
                    counts.seen(port)
            elif isinstance(event, h11.EndOfMessage):
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away
    finally:
        await stream.aclose()


async def answer(conn: h11.Connection, stream: trio.SocketStream, path: str) -> None:
    """Send the reply for ``path``."""
    body = BODIES.get(path, NOT_FOUND)
    status = 200 if path in BODIES else 404
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    data = conn.send(h11.Response(status_code=status, headers=headers))
    data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


async def main(n: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    listeners = [(await trio.open_tcp_listeners(0, host="127.0.0.1"))[0] for _ in range(n)]
    ports = [listener.socket.getsockname()[1] for listener in listeners]
    counts = Counts(ports)
    counts.start()
    async with trio.open_nursery() as nursery:
        for port, listener in zip(ports, listeners, strict=True):
            handler = partial(serve, counts, port)
            nursery.start_soon(partial(trio.serve_listeners, handler, [listener]))
        say(ports=ports)
        async for command in read_commands():
            if command == "start":
                counts.start()
                say(ok=True)
            elif command == "stop":
                say(**counts.report())
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
