"""The bare probers the benchmarks compare the product with, each making one server's
``GET /health`` then ``GET /v1/models`` over one kept-alive connection:

* `HttpxProber`: an ``httpx.AsyncClient`` (what the product used before issue 16);
* `H11Prober`: h11 on a trio socket stream (the floor of a client that frames HTTP with a
  library, as the product's lean wire does);
* `RawProber`: pre-built request bytes on a trio socket stream and the least parsing that
  finds a status and a ``Content-Length`` body (the floor of any HTTP client).

Each `get` returns the status (None on a transport failure, after which the next `get`
reconnects). Not a benchmark itself.
"""

from __future__ import annotations

import ssl

import attrs
import h11
import httpx
import trio

TIMEOUT_S = 2.0


@attrs.define(eq=False)
class HttpxProber:
    port: int
    context: ssl.SSLContext
    client: httpx.AsyncClient | None = None

    async def get(self, path: str) -> int | None:
        if self.client is None:
            limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
            base = f"http://127.0.0.1:{self.port}"
            self.client = httpx.AsyncClient(base_url=base, verify=self.context, limits=limits)
        try:
            return (await self.client.get(path, timeout=TIMEOUT_S)).status_code
        except httpx.HTTPError:
            return None

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()


@attrs.define(eq=False)
class H11Prober:
    port: int
    stream: trio.SocketStream | None = None
    conn: h11.Connection | None = None

    async def get(self, path: str) -> int | None:
        try:
            with trio.fail_after(TIMEOUT_S):
                return await self._get(path)
        except (OSError, trio.BrokenResourceError, trio.TooSlowError, h11.ProtocolError):
            await self.aclose()
            return None

    async def _get(self, path: str) -> int:
        if self.stream is None or self.conn is None:
            self.stream = await trio.open_tcp_stream("127.0.0.1", self.port)
            self.conn = h11.Connection(h11.CLIENT)
        conn, stream = self.conn, self.stream
        headers = [("Host", f"127.0.0.1:{self.port}"), ("Accept-Encoding", "identity")]
        data = conn.send(h11.Request(method="GET", target=path, headers=headers)) or b""
        await stream.send_all(data + (conn.send(h11.EndOfMessage()) or b""))
        status = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                conn.start_next_cycle()
                return status
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("closed")

    async def aclose(self) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)
        self.stream = self.conn = None


@attrs.define(eq=False)
class RawProber:
    port: int
    stream: trio.SocketStream | None = None
    requests: dict[str, bytes] = attrs.Factory(dict)

    async def get(self, path: str) -> int | None:
        request = self.requests.get(path)
        if request is None:
            head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n\r\n"
            request = self.requests[path] = head.encode()
        try:
            with trio.fail_after(TIMEOUT_S):
                if self.stream is None:
                    self.stream = await trio.open_tcp_stream("127.0.0.1", self.port)
                await self.stream.send_all(request)
                return await self._reply(self.stream)
        except (OSError, trio.BrokenResourceError, trio.TooSlowError, ValueError):
            await self.aclose()
            return None

    @staticmethod
    async def _reply(stream: trio.SocketStream) -> int:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ValueError("closed")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ValueError("closed")
            body += chunk
        return int(head.split(b" ", 2)[1])

    async def aclose(self) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)
        self.stream = None
