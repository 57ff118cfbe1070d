"""A fake inference server program with injectable faults, for tests (issue 3, "Real processes").

Runs as a real process: ``python -m inferactors.testing._fake_server --port P [flags]``, or
by file path, which `fake_server_argv` builds because it starts about three times faster (the
``-m`` form imports the ``inferactors`` package first, and with it trio). The program itself
needs only the standard library and attrs; the HTTP server is the standard library's
``ThreadingHTTPServer``. Its options and faults are `FakeServerOptions` and `FakeServerFaults`.

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
  ``/chat/completions`` and ``/v1/completions`` wait for the load, then answer one token; they
  answer 404 ``{"error": ...}`` when the generator is dead (FC-07) or when the body has a
  ``"model"`` other than ``--model`` (FC-09; stricter than the real server, which also takes
  ``"default_model"``); 404 ``Not Found`` on any other path.

Process behaviour:

- Every duration except ``--bind-delay-s`` counts from the moment it listens. Once every
  socket listens it writes ``--child-pid-file`` (with ``--fork-child``), then ``--pid-file``
  (each atomically, by rename), then prints ``inferactors fake server (<flavor>) listening on
  <url> pid <pid>`` on stdout.
- SIGTERM: flavor ``llamacpp`` exits with status 0 (the real llama-server exits 0 on
  SIGTERM); flavor ``mlx`` dies of the signal, returncode -15, shell status 143 (like the real
  mlx_lm.server; real-servers.md). ``--ignore-sigterm`` ignores it (FC-05, FC-11).
- A crash prints ``inferactors fake server: crash (...)`` on stderr, then exits with
  ``--exit-code`` or kills itself with ``--crash-signal``. Core dumps are off (RLIMIT_CORE 0).
- A port it cannot bind: a message on stderr and exit status 1, like llama-server.
- ``--request-log FILE``: one JSON line per request, appended before the request is acted on,
  ``{"at_s": <seconds since listening>, "method": "POST", "path": "/v1/chat/completions",
  "body": "<body text>"}``; read it back with `read_request_log`.
"""

from __future__ import annotations

import argparse
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
from typing import Any, Literal, NoReturn, TypeAlias
from urllib.parse import urlsplit

import attrs

Flavor: TypeAlias = Literal["llamacpp", "mlx"]
Phase: TypeAlias = Literal["loading", "ready", "dead"]

PROGRAM = Path(__file__).resolve()
"""This file; `fake_server_argv` runs it by path."""

TOKEN = " and"
"""The one token every completion answers (what the tiny model says to "the cat")."""

BUILD_INFO = "b0-fake"
"""``/props`` ``build_info`` and the completions' ``system_fingerprint``."""


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, not {value}")


def _signal_name(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in signal.Signals.__members__:
        raise ValueError(f"{attribute.name}: unknown signal {value!r} (use a name like SIGABRT)")


def _port(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and not 0 < value < 65536:
        raise ValueError(f"{attribute.name} must be a TCP port (1 to 65535), not {value}")


@attrs.frozen(kw_only=True)
class FakeServerFaults:
    """The faults a fake server injects; each field is the flag with ``-`` for ``_``.

    Durations are float seconds, counted from the moment the server listens (``bind_delay_s``
    from process start). Field defaults inject nothing. Raises ValueError for a negative
    duration or count, an unknown signal name (names are `signal.Signals` names such as
    ``"SIGABRT"``) or a port outside 1 to 65535.

    Attributes:
        load_s: Answer "loading" for this long, then serve (llamacpp: 503; mlx: completions wait).
        load_forever: Load forever (FC-06; with mlx, health 200 and completions hang: FC-07).
        dead_generator: mlx only: the generation thread dies when the load ends (FC-07).
        crash_after_s: Crash this long after listening, with ``exit_code`` or ``crash_signal``.
        exit_code: The exit status of that crash when ``crash_signal`` is None.
        crash_signal: Kill itself with this signal instead (FC-10: ``"SIGABRT"``).
        crash_on_completion: Kill itself with this signal on its first completion (FC-08).
        ignore_sigterm: Ignore SIGTERM; only SIGKILL stops it (FC-05, FC-11).
        hang_completions: Health stays fine, completions never answer (FC-04, FC-07).
        fail_completions_after: The first N completions work, later ones hang.
        extra_port: Also listen (same API) on this port of ``extra_host`` (FC-15 exposure).
        extra_host: The address of ``extra_port``; tests use 127.0.0.1 or 127.0.0.2.
        fork_child: Fork a child that stays alive, in the same process group, holding the
            listening sockets it inherits (FC-12).
        bind_delay_s: Refuse connections (not listening yet) for this long after start.
    """

    load_s: float = attrs.field(default=0.0, validator=_non_negative)
    load_forever: bool = False
    dead_generator: bool = False
    crash_after_s: float | None = attrs.field(default=None, validator=_non_negative)
    exit_code: int = attrs.field(
        default=1, validator=[attrs.validators.ge(0), attrs.validators.le(255)]
    )
    crash_signal: str | None = attrs.field(default=None, validator=_signal_name)
    crash_on_completion: str | None = attrs.field(default=None, validator=_signal_name)
    ignore_sigterm: bool = False
    hang_completions: bool = False
    fail_completions_after: int | None = attrs.field(default=None, validator=_non_negative)
    extra_port: int | None = attrs.field(default=None, validator=_port)
    extra_host: str = "127.0.0.1"
    fork_child: bool = False
    bind_delay_s: float = attrs.field(default=0.0, validator=_non_negative)

    def args(self) -> tuple[str, ...]:
        """The flags for the fields that differ from their defaults, e.g. ``("--load-s", "0.5")``."""
        out: list[str] = []
        for field in attrs.fields(FakeServerFaults):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            flag = "--" + field.name.replace("_", "-")
            out.extend([flag] if value is True else [flag, str(value)])
        return tuple(out)


def _model_needs_flavor(options: FakeServerOptions, _: object, value: FakeServerFaults) -> None:
    if value.dead_generator and options.flavor != "mlx":
        raise ValueError("dead_generator is an mlx_lm.server fault: use flavor 'mlx'")


@attrs.frozen(kw_only=True)
class FakeServerOptions:
    """Everything the program takes: where it listens, what it serves, where it writes.

    ``alias`` (llamacpp's ``-a``) replaces ``model`` as the id in ``/v1/models``. Raises
    ValueError as `FakeServerFaults` does, and for ``dead_generator`` with flavor llamacpp.
    """

    port: int = attrs.field(validator=_port)
    host: str = "127.0.0.1"
    flavor: Flavor = attrs.field(
        default="llamacpp", validator=attrs.validators.in_(("llamacpp", "mlx"))
    )
    model: str = "tiny.gguf"
    alias: str | None = None
    request_log: Path | None = None
    pid_file: Path | None = None
    child_pid_file: Path | None = None
    faults: FakeServerFaults = attrs.field(factory=FakeServerFaults, validator=_model_needs_flavor)

    @property
    def model_id(self) -> str:
        """The id ``/v1/models`` lists: ``alias`` if set, else ``model``."""
        return self.alias if self.alias is not None else self.model

    def args(self) -> tuple[str, ...]:
        """The program's command-line arguments (after the program) for these options."""
        out = ["--host", self.host, "--port", str(self.port), "--flavor", self.flavor]
        out += ["--model", self.model]
        named = {"--alias": self.alias, "--request-log": self.request_log}
        named |= {"--pid-file": self.pid_file, "--child-pid-file": self.child_pid_file}
        for flag, value in named.items():
            out += [] if value is None else [flag, str(value)]
        return (*out, *self.faults.args())


def fake_server_argv(
    port: int,
    *,
    flavor: Flavor = "llamacpp",
    model: str = "tiny.gguf",
    faults: FakeServerFaults = FakeServerFaults(),  # noqa: B008  frozen, so sharing it is safe
    python: str = sys.executable,
    host: str = "127.0.0.1",
    alias: str | None = None,
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
) -> list[str]:
    """The argv that runs a fake server: ``[python, "-I", <this file>, "--host", ...]``.

    ``-I`` (isolated mode) keeps the caller's ``PYTHON*`` variables and working directory out.
    Example: ``fake_server_argv(port, faults=FakeServerFaults(crash_after_s=0.5, exit_code=3))``.
    Raises ValueError for invalid options (see `FakeServerOptions`).
    """
    options = FakeServerOptions(
        port=port, host=host, flavor=flavor, model=model, alias=alias, request_log=request_log,
        pid_file=pid_file, child_pid_file=child_pid_file, faults=faults,
    )  # fmt: skip
    return [python, "-I", str(PROGRAM), *options.args()]


def parse_fake_server_args(argv: Sequence[str]) -> FakeServerOptions:
    """Parse the program's arguments (without the program name) into `FakeServerOptions`.

    The inverse of `FakeServerOptions.args`. Exits with status 2 and a usage message on bad
    arguments (argparse's behaviour).
    """
    parser = _parser()
    namespace = vars(parser.parse_args(list(argv)))
    fault_names = {field.name for field in attrs.fields(FakeServerFaults)}
    try:
        faults = FakeServerFaults(**{k: v for k, v in namespace.items() if k in fault_names})
        return FakeServerOptions(
            **{k: v for k, v in namespace.items() if k not in fault_names}, faults=faults
        )
    except ValueError as exc:
        parser.error(str(exc))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inferactors.testing._fake_server",
        description="inferactors' fake llama-server / mlx_lm.server with injectable faults.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, required=True)
    add("--flavor", choices=("llamacpp", "mlx"), default="llamacpp")
    add("--model", default="tiny.gguf", help="the served model path (mlx: the only one allowed)")
    add("--alias", help="llamacpp: the id /v1/models lists instead of --model")
    for name in ("--request-log", "--pid-file", "--child-pid-file"):
        add(name, type=Path)
    add("--load-s", type=float, default=0.0, help="answer 'loading' for S seconds")
    add("--load-forever", action="store_true", help="load forever (FC-06, FC-07)")
    add("--dead-generator", action="store_true", help="mlx: generator dies when loaded")
    add("--crash-after-s", type=float, help="crash S seconds after listening")
    add("--exit-code", type=int, default=1, help="exit status of that crash")
    add("--crash-signal", help="crash by this signal instead (e.g. SIGABRT)")
    add("--crash-on-completion", metavar="SIGNAL", help="die on the first completion (FC-08)")
    add("--ignore-sigterm", action="store_true", help="ignore SIGTERM (FC-05, FC-11)")
    add("--hang-completions", action="store_true", help="never answer completions (FC-04)")
    add("--fail-completions-after", type=int, metavar="N", help="hang after N completions")
    add("--extra-port", type=int, help="also listen on this port (of --extra-host)")
    add("--extra-host", default="127.0.0.1")
    add("--fork-child", action="store_true", help="fork a child that stays alive (FC-12)")
    add("--bind-delay-s", type=float, default=0.0, help="listen only after S seconds")
    return parser


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


def read_request_log(path: Path) -> tuple[LoggedRequest, ...]:
    """Every complete line of a ``--request-log`` file, oldest first; () if there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    lines = text.split("\n")[:-1]  # a last line without its newline is still being written
    return tuple(LoggedRequest(**json.loads(line)) for line in lines)


# --- the program -----------------------------------------------------------------------------


@attrs.frozen
class _Reply:
    status: int
    document: object  # a JSON value, or None for a plain "Not Found"


@attrs.frozen
class _Complete:
    path: str  # a completion to serve, under the completion faults


@attrs.frozen
class _AwaitLoad:
    """An mlx completion that arrived during the load: wait for it, then decide again."""


@attrs.frozen
class _Hang:
    """Never answer."""


@attrs.frozen
class _Die:
    signal: str | None
    exit_code: int = 1


_Action: TypeAlias = _Reply | _Complete | _AwaitLoad | _Hang | _Die

_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
_LLAMA_404 = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
_LLAMA_COMPLETIONS = frozenset(
    {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completion", "/completions"}
)
_MLX_COMPLETIONS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions"})
_META = {"vocab_type": 1, "n_vocab": 420, "n_ctx_train": 4096, "n_embd": 64, "size": 511232}
_NEVER = threading.Event()


def decide(
    options: FakeServerOptions, phase: Phase, method: str, target: str, body: bytes
) -> _Action:
    """What the server does with one request in ``phase``; pure (no I/O)."""
    path = urlsplit(target).path
    if options.flavor == "mlx":
        return _decide_mlx(options, phase, (method, path), body)
    return _decide_llamacpp(options, phase, (method, path))


def _decide_llamacpp(options: FakeServerOptions, phase: Phase, route: tuple[str, str]) -> _Action:
    method, path = route
    if route in (("GET", "/v1/models"), ("GET", "/models")):
        return _Reply(200, _models(options, "llamacpp", phase))
    if phase == "loading":
        return _Reply(503, _LOADING)
    if route in (("GET", "/health"), ("GET", "/v1/health")):
        return _Reply(200, {"status": "ok"})
    if route == ("GET", "/props"):
        return _Reply(200, _props(options))
    if method == "POST" and path in _LLAMA_COMPLETIONS:
        return _Complete(path)
    return _Reply(404, _LLAMA_404)


def _decide_mlx(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> _Action:
    method, path = route
    if route == ("GET", "/health"):
        return (
            _Reply(503, {"status": "unavailable"})
            if phase == "dead"
            else _Reply(200, {"status": "ok"})
        )
    if route == ("GET", "/v1/models"):
        return _Reply(200, _models(options, "mlx", phase))
    if method != "POST" or path not in _MLX_COMPLETIONS:
        return _Reply(404, None)
    wanted = _model_field(body)
    if wanted is not None and wanted != options.model:
        return _Reply(404, {"error": f"model {wanted!r} is not the served --model (FC-09)"})
    if phase == "dead":
        return _Reply(404, {"error": "generation thread died"})
    return _AwaitLoad() if phase == "loading" else _Complete(path)


def completion_fate(faults: FakeServerFaults, number: int) -> _Action:
    """What the ``number``-th served completion (from 1) meets under ``faults``; pure."""
    if faults.crash_on_completion is not None:
        return _Die(faults.crash_on_completion)
    limit = faults.fail_completions_after
    if faults.hang_completions or (limit is not None and number > limit):
        return _Hang()
    return _Complete("")


def _model_field(body: bytes) -> object:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get("model") if isinstance(document, dict) else None


def _models(options: FakeServerOptions, flavor: Flavor, phase: Phase) -> dict[str, object]:
    created = int(time.time())
    if flavor == "mlx":
        entries = (
            []
            if phase == "dead"
            else [{"id": options.model, "object": "model", "created": created}]
        )
        return {"object": "list", "data": entries}
    entry = {
        "id": options.model_id, "aliases": [options.model_id], "tags": [], "object": "model",
        "created": created, "owned_by": "llamacpp", "meta": None if phase == "loading" else _META,
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
