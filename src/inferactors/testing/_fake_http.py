"""The fake inference server's HTTP side: the request threads and what they share.

`Handler` (the standard library's ``BaseHTTPRequestHandler``, one thread per connection on
`Server`, ``ThreadingHTTPServer``, so a hung request hangs only itself) carries out what
``_fake_answers`` decides for each request: a JSON reply, a stream of server-sent events,
a hang, a TCP reset, or a crash, which it asks the main thread for through `FakeState`.
`FakeState` is what the request threads share: the options, when it began listening, the
completion count, and the queue of fates. The process around them (signals, files, its
parent) is ``_fake_server``. Split from ``_fake_server``.
"""

from __future__ import annotations

import json
import queue
import socket
import socketserver
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from . import _fake_replies as replies
from ._fake_answers import (
    AwaitLoad,
    Complete,
    Die,
    Outcome,
    Phase,
    Reply,
    Reset,
    Stream,
    completion_fate,
    decide,
)
from ._fake_faults import FakeServerOptions
from ._fake_launch import LoggedRequest
from ._fake_streams import stream_frames

_NEVER = threading.Event()
_RESET_LINGER = struct.pack("ii", 1, 0)


@attrs.define(eq=False)
class FakeState:
    """What the request threads share: the options, the clock origin, the completion count,
    and the queue through which they ask the main thread to end the process."""

    options: FakeServerOptions
    listening_at: float
    fates: queue.Queue[Die] = attrs.Factory(queue.Queue)
    served: int = 0
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    @classmethod
    def now_listening(cls, options: FakeServerOptions) -> FakeState:
        """State whose durations count from now (``time.monotonic``)."""
        return cls(options, time.monotonic())

    def load_left_s(self) -> float | None:
        """Seconds of loading left (0.0 once loaded), None when loading forever."""
        faults = self.options.faults
        if faults.load_forever:
            return None
        return max(0.0, faults.load_s - (time.monotonic() - self.listening_at))

    def phase(self) -> Phase:
        """Loading, then ready, or dead (mlx ``dead_generator``) once the load ends."""
        if self.load_left_s() != 0.0:
            return "loading"
        return "dead" if self.options.faults.dead_generator else "ready"

    def next_completion(self) -> int:
        """Count one more served completion; return its number, from 1."""
        with self._lock:
            self.served += 1
            return self.served

    def settle(self, method: str, target: str, body: bytes) -> Outcome:
        """The outcome of one request, after waiting out a load if it must (mlx)."""
        while True:
            action = decide(self._options_now(), self.phase(), method, target, body)
            if isinstance(action, AwaitLoad):
                left_s = self.load_left_s()
                _NEVER.wait(left_s)
            elif isinstance(action, Complete):
                _NEVER.wait(self.options.faults.completion_delay_s)
                number = self.next_completion()
                return completion_fate(self.options, action.path, number, stream=action.stream)
            else:
                return action

    def _options_now(self) -> FakeServerOptions:
        """The options, without ``health_fault`` until ``health_fault_after_s`` has passed."""
        faults = self.options.faults
        started = time.monotonic() - self.listening_at >= faults.health_fault_after_s
        if faults.health_fault is None or started:
            return self.options
        return attrs.evolve(self.options, faults=attrs.evolve(faults, health_fault=None))

    def log(self, method: str, target: str, body: bytes) -> None:
        """Append the request to ``--request-log``, if set."""
        if self.options.request_log is None:
            return
        at_s = round(time.monotonic() - self.listening_at, 6)
        entry = LoggedRequest(at_s, method, target, body.decode("utf-8", errors="replace"))
        with self._lock, self.options.request_log.open("a", encoding="utf-8") as log:
            log.write(entry.line())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "inferactors-fake"
    disable_nagle_algorithm = True  # a reply's head and body are two writes: without this, a
    # kept-alive connection waits 40 ms for the client's delayed ACK (llama-server does not)
    server: Server

    def do_GET(self) -> None:
        self._respond("GET")

    def do_POST(self) -> None:
        self._respond("POST")

    def do_HEAD(self) -> None:
        if self.server.state.options.flavor == "mlx":  # mlx_lm.server has no HEAD: 501
            self.server.state.log("HEAD", self.path, b"")
            self.send_error(501, "Unsupported method ('HEAD')")
            return
        self._respond("HEAD")

    def do_OPTIONS(self) -> None:
        """A CORS preflight: llama-server 200 (``text/html``, empty), mlx_lm.server 204."""
        state = self.server.state
        state.log("OPTIONS", self.path, self._body())
        mlx = state.options.flavor == "mlx"
        self.send_response(204 if mlx else 200)
        self.send_header("Content-Type", "application/json" if mlx else "text/html")
        self._common_headers(200, preflight=True)
        if not mlx:
            self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log replaces the stderr line per request."""

    def _respond(self, method: str) -> None:
        state = self.server.state
        body = self._body()
        state.log(method, self.path, body)
        outcome = state.settle("GET" if method == "HEAD" else method, self.path, body)
        if isinstance(outcome, Reply):
            self._send(outcome, head=method == "HEAD")
            return
        if isinstance(outcome, Stream):
            self._stream(outcome)
            return
        if isinstance(outcome, Reset):  # SO_LINGER 0: the close sends a TCP reset
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_LINGER)
            self.connection.close()
            self.close_connection = True
            return
        if isinstance(outcome, Die):
            state.fates.put(outcome)  # the main thread ends the process
        _NEVER.wait()

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: Reply, *, head: bool = False) -> None:
        if reply.document is None:
            data, kind = b"Not Found", "text/plain"
        else:
            data, kind = json.dumps(reply.document).encode(), "application/json; charset=utf-8"
        if self.server.state.options.flavor == "mlx":
            kind = "application/json"  # mlx_lm.server's label on every reply, its 404 text too
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self._common_headers(reply.status)
        if head:
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if head:
            return
        if reply.cut_after is not None and reply.cut_after < len(data):
            self._cut(data[: reply.cut_after])
            return
        self.wfile.write(data)

    def _stream(self, stream: Stream) -> None:
        """Server-sent events: llama-server's chunked, mlx_lm.server's until the close."""
        chunked = self.server.state.options.flavor == "llamacpp"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self._common_headers(200)
        if chunked:
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
        self.end_headers()
        faults = self.server.state.options.faults
        left = stream.cut_after
        for frame in stream_frames(stream.events, faults, chunked=chunked):
            if frame is None:  # die here, mid-answer
                self.server.state.fates.put(Die("SIGKILL"))
                _NEVER.wait()
                return
            if left is not None and left < len(frame):
                self._cut(frame[:left])
                return
            left = None if left is None else left - len(frame)
            self.wfile.write(frame)
            self.wfile.flush()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _cut(self, data: bytes) -> None:
        """Send ``data``, the start of a body, then close the connection (a FIN: the client
        reads an answer that ends early)."""
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _common_headers(self, status: int, *, preflight: bool = False) -> None:
        """CORS, and llama-server's connection headers: ``Keep-Alive``, or ``Connection:
        close`` on an error status (and the connection is closed after the reply)."""
        flavor = self.server.state.options.flavor
        origin = self.headers.get("Origin", "")
        for name, value in replies.cors_headers(flavor, origin, preflight=preflight):
            self.send_header(name, value)
        if flavor == "llamacpp" and status >= 400:
            self.send_header("Connection", "close")
        elif flavor == "llamacpp":
            self.send_header("Keep-Alive", "timeout=5, max=100")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    state: FakeState

    def server_bind(self) -> None:
        """Bind without `HTTPServer.server_bind`'s ``getfqdn``, a lookup that may ask DNS."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.socket.getsockname()[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """Quiet about clients that hang up; anything else is printed as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Server6(Server):
    address_family = socket.AF_INET6
