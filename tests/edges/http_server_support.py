"""A fake llama-server built on Python's ``http.server`` (what mlx_lm.server runs on), in a
thread of the test process: HTTP/1.0 (close after each reply, as mlx_lm.server does) or
HTTP/1.1 (kept alive), headers and body sent as the standard library sends them (two
writes, Nagle left on). Counts the connections it accepted. Imported as
``edges.http_server_support``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from edges.keepalive_support import BODIES

Version = Literal["HTTP/1.0", "HTTP/1.1"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    paths: list[str]

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


def _handler(version: Version) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = version

        def do_GET(self) -> None:
            server = self.server
            assert isinstance(server, _Server)
            server.paths.append(self.path)
            body = BODIES.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def http_server(version: Version) -> Iterator[_Server]:
    """Serve on a free loopback port (``server.server_address``) until the block ends."""
    server = _Server(("127.0.0.1", 0), _handler(version))
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
