"""The fake inference server program with injectable faults (issue 3, "Real processes").

Its flags are `FakeServerOptions` and `FakeServerFaults`, and what it answers is decided by
the pure functions of ``_fake_faults``; this module is the I/O: the standard library's
``ThreadingHTTPServer`` (one thread per connection, so a hung request hangs only itself),
the process, its signals and its files, plus `fake_server_argv` to run it and
`read_request_log` to read what it logged.

Run it through `fake_server_argv`: a small bootstrap (``python -I -c ...``) imports it
without running the ``inferactors`` package's ``__init__`` (which imports trio and the whole
library, about 0.2 s), so a fake listens about 0.1 s after spawn. ``python -m
inferactors.testing._fake_server --port P [flags]`` runs the same program, slower to start.

- Every duration but ``--bind-delay-s`` counts from the moment it listens. Once every socket
  listens it forks the child (``--fork-child``), writes ``--child-pid-file`` then
  ``--pid-file`` (each atomically, by rename), and prints ``inferactors fake server (<flavor>)
  listening on <url> pid <pid>`` on stdout. Relative paths resolve against its working
  directory.
- SIGTERM: flavor ``llamacpp`` exits with status 0 (the real llama-server exits 0 on
  SIGTERM); flavor ``mlx`` dies of the signal: returncode -15, shell status 143, like the real
  mlx_lm.server (real-servers.md). ``--ignore-sigterm`` ignores it (FC-05, FC-11). SIGINT
  kills it.
- A crash prints ``inferactors fake server: crash (<signal or exit status>)`` on stderr, then
  kills itself with the signal or exits with the status. Core dumps are off (RLIMIT_CORE 0).
- A port it cannot bind: a message on stderr and exit status 1, like llama-server.
- ``--request-log FILE``: one JSON line per request, appended before the request is acted on
  (so a request that crashes or hangs the server is logged); `read_request_log` reads it.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import shlex
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import attrs

from ._fake_faults import (
    AwaitLoad,
    Complete,
    Die,
    FakeServerFaults,
    FakeServerOptions,
    Flavor,
    Outcome,
    Phase,
    Reply,
    completion_fate,
    decide,
    parse_fake_server_args,
)

_NEVER = threading.Event()
_TESTING_DIR = Path(__file__).resolve().parent
_NO_FAULTS = FakeServerFaults()


# --- how to run it, and what it logs ------------------------------------------------------


def fake_server_argv(
    port: int,
    *,
    flavor: Flavor = "llamacpp",
    model: str = "tiny.gguf",
    faults: FakeServerFaults = _NO_FAULTS,
    python: str = sys.executable,
    host: str = "127.0.0.1",
    alias: str | None = None,
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
    sys_path: Sequence[str] = (),
) -> list[str]:
    """The argv that runs a fake server: ``[python, "-I", "-c", <bootstrap>, "--host", ...]``.

    ``sys_path`` entries go first on the program's ``sys.path``: for a ``python`` other than
    the one inferactors runs on (e.g. one an unprivileged ``run_as`` user can execute), name
    the directory that holds attrs.

    Example: ``fake_server_argv(port, faults=FakeServerFaults(crash_after_s=0.5, exit_code=3))``.
    ``python`` must have attrs installed. ``-I`` (isolated mode) keeps the caller's
    ``PYTHON*`` variables and working directory out of the program's imports. Raises
    ValueError for invalid options (see `FakeServerOptions`).
    """
    options = FakeServerOptions(
        port=port,
        host=host,
        flavor=flavor,
        model=model,
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        faults=faults,
    )
    return [python, "-I", "-c", _bootstrap(tuple(sys_path)), *options.args()]


def write_fake_server_program(
    path: Path,
    *,
    flavor: Flavor = "llamacpp",
    faults: FakeServerFaults = _NO_FAULTS,
    python: str = sys.executable,
    sys_path: Sequence[str] = (),
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
) -> Path:
    """Write an executable ``sh`` script at ``path`` that runs the fake server with
    ``faults``, taking the rest of its flags (``-m``/``--model``, ``--host``, ``--port``,
    and llama-server's ``-c``, ``-ctk``, ``-ctv``, ``-md`` and allowlisted flags, which it
    ignores) from its own arguments: a drop-in ``serve_program`` for a managed runtime.
    Mode 0755, so an unprivileged ``run_as`` user can run it. Returns ``path``.
    """
    argv = fake_server_argv(
        1,
        flavor=flavor,
        faults=faults,
        python=python,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        sys_path=sys_path,
    )
    fixed = [*argv[:4], *_without(argv[4:], ("--host", "--port", "--model"))]
    path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in fixed) + ' "$@"\n')
    path.chmod(0o755)
    return path


def _without(flags: Sequence[str], dropped: Sequence[str]) -> list[str]:
    """``flags`` minus each ``FLAG VALUE`` pair named in ``dropped`` (the launch passes its own)."""
    rest = list(flags)
    for flag in dropped:
        while flag in rest:
            at = rest.index(flag)
            del rest[at : at + 2]
    return rest


def _bootstrap(sys_path: tuple[str, ...] = ()) -> str:
    """Code that registers bare ``inferactors`` and ``inferactors.testing`` packages (their
    ``__init__`` not run), then runs the program's ``main``."""
    packages = (
        ("inferactors", str(_TESTING_DIR.parent)),
        ("inferactors.testing", str(_TESTING_DIR)),
    )
    return (
        "import sys, types\n"
        f"sys.path[:0] = {list(sys_path)!r}\n"
        f"for name, where in {packages!r}:\n"
        "    sys.modules[name] = package = types.ModuleType(name)\n"
        "    package.__path__ = [where]\n"
        "from inferactors.testing._fake_server import main\n"
        "main()\n"
    )


@attrs.frozen
class LoggedRequest:
    """One line of the request log: seconds since listening, method, path, body text."""

    at_s: float
    method: str
    path: str
    body: str

    def json(self) -> object:
        """The body parsed as JSON, or None when it is empty. Raises ValueError if not JSON."""
        return json.loads(self.body) if self.body else None

    def line(self) -> str:
        """The line in the log: a JSON object with these four fields, and a newline."""
        return json.dumps(attrs.asdict(self)) + "\n"


def read_request_log(path: Path) -> tuple[LoggedRequest, ...]:
    """Every complete line of a ``--request-log`` file, oldest first; () if there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    lines = text.split("\n")[:-1]  # a last line without its newline is still being written
    return tuple(LoggedRequest(**json.loads(line)) for line in lines)


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
            action = decide(self.options, self.phase(), method, target, body)
            if isinstance(action, AwaitLoad):
                left_s = self.load_left_s()
                _NEVER.wait(left_s)
            elif isinstance(action, Complete):
                return completion_fate(self.options, action.path, self.next_completion())
            else:
                return action

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
    server: _Server

    def do_GET(self) -> None:
        self._respond("GET")

    def do_POST(self) -> None:
        self._respond("POST")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log replaces the stderr line per request."""

    def _respond(self, method: str) -> None:
        state = self.server.state
        body = self._body()
        state.log(method, self.path, body)
        outcome = state.settle(method, self.path, body)
        if isinstance(outcome, Reply):
            self._send(outcome)
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

    def _send(self, reply: Reply) -> None:
        if reply.document is None:
            data, kind = b"Not Found", "text/plain"
        else:
            data, kind = json.dumps(reply.document).encode(), "application/json; charset=utf-8"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


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
    options = parse_fake_server_args(sys.argv[1:] if argv is None else argv)
    _prepare_process(options)
    time.sleep(options.faults.bind_delay_s)
    servers = _listen(options)
    state = FakeState.now_listening(options)
    _announce(options)  # forks before any thread starts
    for server in servers:
        server.state = state
        threading.Thread(target=server.serve_forever, daemon=True).start()
    _await_fate(state)


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


def _announce(options: FakeServerOptions) -> None:
    if options.faults.fork_child:
        child = _fork_child()
        if options.child_pid_file is not None:
            _write_atomically(options.child_pid_file, str(child))
    if options.pid_file is not None:
        _write_atomically(options.pid_file, str(os.getpid()))
    host = f"[{options.host}]" if ":" in options.host else options.host
    url = f"http://{host}:{options.port}"
    print(f"inferactors fake server ({options.flavor}) listening on {url} pid {os.getpid()}")
    sys.stdout.flush()


def _fork_child() -> int:
    """Fork a child that sleeps until a signal ends it, in our process group, holding our
    listening sockets; return its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                signal.pause()
        finally:
            os._exit(0)
    return pid


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    staging.rename(path)


_SLICE_S = 0.05


def _await_fate(state: FakeState) -> NoReturn:
    """Wait in the main thread for a crash: ``crash_after_s`` or one a request asked for."""
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
