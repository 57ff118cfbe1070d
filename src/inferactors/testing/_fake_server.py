"""The fake inference server program with injectable faults.

Its flags are `FakeServerOptions` and `FakeServerFaults`, and what it answers is decided by
the pure functions of ``_fake_answers``; this module is the I/O: the standard library's
``ThreadingHTTPServer`` (one thread per connection, so a hung request hangs only itself),
the process, its signals and its files. How to run it (`fake_server_argv`,
`write_fake_server_program`) and how to read what it logged (`read_request_log`) is
``_fake_launch``; those names are re-exported here.

Run it through `fake_server_argv`: a small bootstrap (``python -I -c ...``) imports it
without running the ``inferactors`` package's ``__init__`` (which imports trio and the whole
library, about 0.2 s), so a fake listens about 0.1 s after spawn. ``python -m
inferactors.testing._fake_server --port P [flags]`` runs the same program, slower to start.

- Every duration but ``--bind-delay-s`` counts from the moment it listens. Once every socket
  listens it forks the child (``--fork-child``), writes ``--child-pid-file`` then
  ``--pid-file`` (each atomically, by rename), and prints ``inferactors fake server (<flavor>)
  listening on <url> pid <pid>`` on stdout. Relative paths resolve against its working
  directory.
- On stderr it prints the readiness lines of the server it imitates (``_fake_lines``):
  llama-server's ``model loaded`` once its load is over, mlx_lm.server's ``Starting httpd``.
- SIGTERM: flavor ``llamacpp`` exits with status 0 (the real llama-server exits 0 on
  SIGTERM); flavor ``mlx`` dies of the signal: returncode -15, shell status 143, like the real
  mlx_lm.server. ``--ignore-sigterm`` ignores it (FC-05, FC-11). SIGINT
  kills it.
- A crash prints ``inferactors fake server: crash (<signal or exit status>)`` on stderr, then
  kills itself with the signal or exits with the status. Core dumps are off (RLIMIT_CORE 0).
- It exits (status 0) within 0.05 s of the death of the process that started it (its
  parent, or whoever started the session a wrapper of it leads: see ``_fake_parent``), and
  so does the child of ``--fork-child``, so nothing is left when a test runner is killed or
  a script forgets ``stop()``; ``--outlive-parent`` keeps it serving as an orphan (FC-13).
  A runtime that manages it is that process.
- A port it cannot bind: a message on stderr and exit status 1, like llama-server.
- ``--flood-start-bytes``, ``--flood-bytes-per-s``: log floods on stderr (``_fake_flood``;
  ``--flood-stats FILE`` says how long its writes waited on the pipe).
- ``--request-log FILE``: one JSON line per request, appended before the request is acted on
  (so a request that crashes or hangs the server is logged); `read_request_log` reads it.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

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
from ._fake_faults import FakeServerOptions, parse_fake_server_args
from ._fake_flood import flood_at_start, start_flood
from ._fake_launch import LoggedRequest as LoggedRequest
from ._fake_launch import fake_server_argv as fake_server_argv
from ._fake_launch import read_request_log as read_request_log
from ._fake_launch import write_fake_server_program as write_fake_server_program
from ._fake_lines import say_ready
from ._fake_parent import SLICE_S as _SLICE_S
from ._fake_parent import Launcher, exit_if_orphaned, fork_child, sleep_watching
from ._fake_streams import stream_frames

_NEVER = threading.Event()
_RESET_LINGER = struct.pack("ii", 1, 0)


# --- the running server ----------------------------------------------------------------------


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "inferactors-fake"
    disable_nagle_algorithm = True  # a reply's head and body are two writes: without this, a
    # kept-alive connection waits 40 ms for the client's delayed ACK (llama-server does not)
    server: _Server

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


class _Server(ThreadingHTTPServer):
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


class _Server6(_Server):
    address_family = socket.AF_INET6


# --- the process -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the fake server until a signal or a fault ends it (see the module docstring)."""
    launcher = Launcher.find()  # the process that started it: the fake does not outlive it
    options = parse_fake_server_args(sys.argv[1:] if argv is None else argv)
    watched = None if options.faults.outlive_parent else launcher
    _prepare_process(options)
    flood_at_start(options)
    sleep_watching(options.faults.bind_delay_s, watched)
    servers = _listen(options)
    state = FakeState.now_listening(options)
    _announce(options, watched)  # forks before any thread starts
    for server in servers:
        server.state = state
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ready = (options, state.load_left_s())
    threading.Thread(target=say_ready, args=ready, daemon=True).start()
    start_flood(options)
    _await_fate(state, watched)


def _prepare_process(options: FakeServerOptions) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if options.faults.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif options.flavor == "llamacpp":
        signal.signal(signal.SIGTERM, _exit_cleanly)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    os._exit(0)  # no flush: a signal during a flush would raise "reentrant call"


def _listen(options: FakeServerOptions) -> list[_Server]:
    faults = options.faults
    addresses = [(options.host, options.port)]
    if faults.extra_port is not None:
        addresses.append((faults.extra_host, faults.extra_port))
    servers = []
    for host, port in addresses:
        kind = _Server6 if ":" in host else _Server
        try:
            servers.append(kind((host, port), _Handler))
        except OSError as exc:
            print(
                f"inferactors fake server: cannot listen on {host}:{port}: {exc}", file=sys.stderr
            )
            sys.exit(1)
    return servers


def _announce(options: FakeServerOptions, watched: Launcher | None) -> None:
    if options.faults.fork_child:
        child = fork_child(watched)
        if options.child_pid_file is not None:
            _write_atomically(options.child_pid_file, str(child))
    if options.pid_file is not None:
        _write_atomically(options.pid_file, str(os.getpid()))
    host = f"[{options.host}]" if ":" in options.host else options.host
    url = f"http://{host}:{options.port}"
    print(f"inferactors fake server ({options.flavor}) listening on {url} pid {os.getpid()}")
    sys.stdout.flush()


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    staging.rename(path)


def _await_fate(state: FakeState, watched: Launcher | None) -> NoReturn:
    """Wait in the main thread for a crash: ``crash_after_s`` or one a request asked for;
    exit if the launcher ``watched`` dies (checked every 0.05 s)."""
    faults = state.options.faults
    deadline = None
    if faults.crash_after_s is not None:
        deadline = state.listening_at + faults.crash_after_s
    while True:
        # Wait in short slices: Python runs signal handlers (SIGTERM) only in the main
        # thread between bytecodes, which a lock wait without a timeout never reaches.
        slice_s = _SLICE_S if deadline is None else min(_SLICE_S, deadline - time.monotonic())
        try:
            _die(state.fates.get(timeout=max(0.0, slice_s)))
        except queue.Empty:
            exit_if_orphaned(watched)
            if deadline is not None and time.monotonic() >= deadline:
                _die(Die(faults.crash_signal, faults.exit_code))


def _die(fate: Die) -> NoReturn:
    how = fate.signal or f"exit status {fate.exit_code}"
    print(f"inferactors fake server: crash ({how})", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if fate.signal is not None:
        number = signal.Signals[fate.signal]
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)  # only the main thread may do this
        os.kill(os.getpid(), number)
        time.sleep(1.0)  # a signal whose default is to go on (SIGCHLD, ...) leaves us here
    os._exit(fate.exit_code)


if __name__ == "__main__":
    main()
