"""The fake inference server program with injectable faults (issue 3, "Real processes").

Run it through `fake_server_argv` (about 80 ms from spawn to listening), or as
``python -m inferactors.testing._fake_server --port P [flags]`` (slower: that imports the
whole ``inferactors`` package first). Its flags are `FakeServerOptions` and
`FakeServerFaults` (``_fake_faults``). HTTP comes from the standard library's
``ThreadingHTTPServer``, one thread per connection, so a hung request hangs only itself.

It speaks enough of the real servers' HTTP APIs for probes and deep health (server-apis.md
sections 1 and 2; the shapes were checked against the real llama-server here):

- flavor ``llamacpp`` (llama-server): ``GET /health`` 200 ``{"status":"ok"}``, or 503
  ``{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`` while
  loading, as is every other endpoint except ``/v1/models`` and ``/models``, which answer with
  ``meta`` null (FC-03); ``GET /props`` (``model_path``, ``model_alias``, ``total_slots``,
  ``build_info``); one-token completions on ``POST /v1/chat/completions``,
  ``/chat/completions``, ``/v1/completions``, ``/completion`` and ``/completions``, with
  ``finish_reason`` ``"length"`` (``stop_type`` ``"limit"`` on ``/completion``); 404 otherwise.
- flavor ``mlx`` (mlx_lm.server 0.32.2): ``GET /health`` 200 even while loading, 503
  ``{"status": "unavailable"}`` once the generator is dead; ``GET /v1/models`` lists
  ``--model`` (nothing once dead); completions on ``POST /v1/chat/completions``,
  ``/chat/completions`` and ``/v1/completions`` wait for the load, then answer one token, or
  404 ``{"error": ...}`` when the body has a ``"model"`` other than ``--model`` (FC-09;
  stricter than the real server, which also takes ``"default_model"``) or when the generator
  is dead (FC-07); 404 ``Not Found`` on any other path.

Process behaviour:

- Every duration but ``--bind-delay-s`` counts from the moment it listens. Once every socket
  listens it forks the child (``--fork-child``), writes ``--child-pid-file`` then
  ``--pid-file`` (each atomically, by rename), and prints ``inferactors fake server (<flavor>)
  listening on <url> pid <pid>`` on stdout.
- SIGTERM: flavor ``llamacpp`` exits with status 0 (the real llama-server exits 0 on
  SIGTERM); flavor ``mlx`` dies of the signal: returncode -15, shell status 143, like the real
  mlx_lm.server (real-servers.md). ``--ignore-sigterm`` ignores it (FC-05, FC-11). SIGINT
  kills it.
- A crash prints ``inferactors fake server: crash (<signal or exit status>)`` on stderr, then
  kills itself with the signal or exits with the status. Core dumps are off (RLIMIT_CORE 0).
- A port it cannot bind: a message on stderr and exit status 1, like llama-server.
- ``--request-log FILE``: one JSON line per request, appended before the request is acted on
  (so a request that crashes or hangs the server is logged), read back by `read_request_log`.
"""

from __future__ import annotations

import json
import os
import queue
import resource
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
from typing import Literal, NoReturn, TypeAlias
from urllib.parse import urlsplit

import attrs

from ._fake_faults import FakeServerOptions, parse_fake_server_args

Phase: TypeAlias = Literal["loading", "ready", "dead"]

TOKEN = " and"
"""The one token every completion answers (what the real tiny model says to "the cat")."""

BUILD_INFO = "b0-fake"
"""``/props`` ``build_info`` and the completions' ``system_fingerprint``."""


@attrs.frozen
class Reply:
    """Answer ``status`` with ``document`` as JSON, or a plain ``Not Found`` when it is None."""

    status: int
    document: object


@attrs.frozen
class Complete:
    """A completion on ``path`` to serve under the completion faults."""

    path: str


@attrs.frozen
class AwaitLoad:
    """An mlx completion that came during the load: wait for the load, then decide again."""


@attrs.frozen
class Hang:
    """Never answer (the connection stays open)."""


@attrs.frozen
class Die:
    """End the process: kill it with ``signal`` (a name), or exit with ``exit_code``."""

    signal: str | None
    exit_code: int = 1


Outcome: TypeAlias = Reply | Hang | Die

_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
_LLAMA_404 = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
_LLAMA_COMPLETIONS = frozenset(
    {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completion", "/completions"}
)
_MLX_COMPLETIONS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions"})
_META = {"vocab_type": 1, "n_vocab": 420, "n_ctx_train": 4096, "n_embd": 64, "size": 511232}
_OK = {"status": "ok"}
_USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
_NEVER = threading.Event()


# --- what to answer (pure) -------------------------------------------------------------------


def decide(
    options: FakeServerOptions, phase: Phase, method: str, target: str, body: bytes
) -> Reply | Complete | AwaitLoad:
    """What the server does with one request while in ``phase``, before completion faults."""
    path = urlsplit(target).path
    if options.flavor == "mlx":
        return _decide_mlx(options, phase, (method, path), body)
    return _decide_llamacpp(options, phase, (method, path))


def completion_fate(options: FakeServerOptions, path: str, number: int) -> Outcome:
    """What the ``number``-th served completion (counting from 1) meets under the faults."""
    faults = options.faults
    if faults.crash_on_completion is not None:
        return Die(faults.crash_on_completion)
    limit = faults.fail_completions_after
    if faults.hang_completions or (limit is not None and number > limit):
        return Hang()
    return Reply(200, _completion(options, path, number))


def _decide_llamacpp(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str]
) -> Reply | Complete:
    method, path = route
    if route in (("GET", "/v1/models"), ("GET", "/models")):
        return Reply(200, _llamacpp_models(options, loaded=phase != "loading"))
    if phase == "loading":
        return Reply(503, _LOADING)
    if route in (("GET", "/health"), ("GET", "/v1/health")):
        return Reply(200, _OK)
    if route == ("GET", "/props"):
        return Reply(200, _props(options))
    if method == "POST" and path in _LLAMA_COMPLETIONS:
        return Complete(path)
    return Reply(404, _LLAMA_404)


def _decide_mlx(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> Reply | Complete | AwaitLoad:
    method, path = route
    if route == ("GET", "/health"):
        return Reply(503, {"status": "unavailable"}) if phase == "dead" else Reply(200, _OK)
    if route == ("GET", "/v1/models"):
        entry = {"id": options.model, "object": "model", "created": int(time.time())}
        return Reply(200, {"object": "list", "data": [] if phase == "dead" else [entry]})
    if method != "POST" or path not in _MLX_COMPLETIONS:
        return Reply(404, None)
    wanted = _model_field(body)
    if wanted is not None and wanted != options.model:
        return Reply(404, {"error": f"model {wanted!r} is not the served --model (FC-09)"})
    if phase == "dead":
        return Reply(404, {"error": "generation thread died"})
    return AwaitLoad() if phase == "loading" else Complete(path)


def _model_field(body: bytes) -> object:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get("model") if isinstance(document, dict) else None


def _llamacpp_models(options: FakeServerOptions, *, loaded: bool) -> dict[str, object]:
    entry = {
        "id": options.model_id, "aliases": [options.model_id], "tags": [], "object": "model",
        "created": int(time.time()), "owned_by": "llamacpp", "meta": _META if loaded else None,
    }  # fmt: skip
    return {"object": "list", "data": [entry]}


def _props(options: FakeServerOptions) -> dict[str, object]:
    return {
        "default_generation_settings": {"n_ctx": 4096},
        "total_slots": 4,
        "model_alias": options.model_id,
        "model_path": options.model,
        "modalities": {"vision": False, "audio": False},
        "build_info": BUILD_INFO,
        "is_sleeping": False,
    }


def _completion(options: FakeServerOptions, path: str, number: int) -> dict[str, object]:
    model = options.model_id
    if path in ("/completion", "/completions"):  # llama-server's own completion shape
        return {"index": 0, "content": TOKEN, "stop": True, "stop_type": "limit", "model": model,
                "tokens_predicted": 1, "tokens_evaluated": 1}  # fmt: skip
    common = {"id": f"cmpl-fake-{number}", "created": int(time.time()), "model": model,
              "system_fingerprint": BUILD_INFO, "usage": _USAGE}  # fmt: skip
    if path == "/v1/completions":
        choice: dict[str, object] = {"index": 0, "text": TOKEN, "finish_reason": "length"}
        return {**common, "object": "text_completion", "choices": [choice]}
    message = {"role": "assistant", "content": TOKEN}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    return {**common, "object": "chat.completion", "choices": [choice]}


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
        line = {
            "at_s": round(time.monotonic() - self.listening_at, 6), "method": method,
            "path": target, "body": body.decode("utf-8", errors="replace"),
        }  # fmt: skip
        with self._lock, self.options.request_log.open("a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")


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

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet about clients that hang up; anything else is printed as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]  # as given


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
    sys.stdout.flush()
    os._exit(0)


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


def _await_fate(state: FakeState) -> NoReturn:
    """Wait in the main thread for a crash: ``crash_after_s`` or one a request asked for."""
    faults = state.options.faults
    timeout_s = None
    if faults.crash_after_s is not None:
        timeout_s = max(0.0, state.listening_at + faults.crash_after_s - time.monotonic())
    try:
        fate = state.fates.get(timeout=timeout_s)
    except queue.Empty:
        fate = Die(faults.crash_signal, faults.exit_code)
    _die(fate)


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
