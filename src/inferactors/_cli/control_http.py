"""One HTTP/1.1 exchange with a supervisor over its Unix socket, for the CLI's client
commands: the standard library's ``http.client`` on an ``AF_UNIX`` socket.

A client command must be done in about the time ``curl --unix-socket`` takes
(``bench/bench_cli_latency.py``); importing httpx (with its TLS and encoding stacks) alone
takes a large part of that, ``http.client`` a few milliseconds. ``http.client`` frames the
request and parses the reply (status line, headers, chunked bodies); this module only
opens the socket and names what failed. (No attrs here either: its import alone costs
more than the rest of a client command's imports.)
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

HOST = "inferactors"
"""The ``Host`` header of every request (the socket, not a name, says where it goes)."""


class UnixConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` to the Unix socket at ``path``: its connect has
    ``connect_timeout_s``, every read after it ``read_timeout_s`` (None: no bound).
    A connect raises what ``socket.connect`` raises (``BlockingIOError`` for a full
    accept queue, ``ConnectionRefusedError``, ``FileNotFoundError``, ``PermissionError``,
    ``TimeoutError``)."""

    def __init__(self, path: str, connect_timeout_s: float, read_timeout_s: float | None) -> None:
        super().__init__(HOST, timeout=connect_timeout_s)
        self.unix_path = path
        self.read_timeout_s = read_timeout_s

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
            sock.settimeout(self.read_timeout_s)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Reply:
    """A reply: its status, and its body read whole (`read`) or line by line
    (`iter_lines`, for NDJSON as it comes). Reading raises ``TimeoutError`` when the
    supervisor is silent past the read timeout, ``OSError`` or
    ``http.client.HTTPException`` when the connection breaks."""

    def __init__(self, response: http.client.HTTPResponse, connection: UnixConnection) -> None:
        self.response = response
        self.connection = connection
        self._body: bytes | None = None

    @property
    def status_code(self) -> int:
        return self.response.status

    @property
    def is_success(self) -> bool:
        return 200 <= self.response.status < 300

    def read(self) -> bytes:
        """The whole body (read once, then kept)."""
        if self._body is None:
            self._body = self.response.read()
        return self._body

    @property
    def text(self) -> str:
        return self.read().decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.read())

    def iter_lines(self) -> Iterator[str]:
        """The body's lines as they arrive, without their line ends."""
        while line := self.response.readline():
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def exchange(
    path: str,
    method: str,
    route: str,
    params: dict[str, str | int | float] | None,
    *,
    connect_timeout_s: float,
    read_timeout_s: float | None,
) -> Reply:
    """Send ``method route?params`` to the socket at ``path`` and return the reply once its
    status and headers came; the body is left to read.

    Raises:
        OSError: the connect failed (see `UnixConnection`), or the request could not be
            sent; ``TimeoutError`` when no reply came within ``read_timeout_s``.
        http.client.HTTPException: the reply was not HTTP, or the connection closed first.
    """
    connection = UnixConnection(path, connect_timeout_s, read_timeout_s)
    target = f"{route}?{urlencode(params)}" if params else route
    try:
        connection.request(method, target, headers={"Accept": "application/json"})
        return Reply(connection.getresponse(), connection)
    except BaseException:
        connection.close()
        raise
