"""The fake inference server, pure: its options and faults, and what it answers.

`FakeServerFaults` and `FakeServerOptions` are the program's flags as values (each field is
its flag with ``-`` for ``_``); `FakeServerOptions.args` writes them and
`parse_fake_server_args` reads them back (the two are inverses). `decide` and
`completion_fate` say what the server answers to each request. The program that runs them,
with its sockets, signals and files, is ``_fake_server``. No I/O here (the replies'
``created`` fields read the wall clock).

The answers follow the real servers' HTTP APIs (the shapes
were checked against the real llama-server here):

- flavor ``llamacpp`` (llama-server): ``GET /health`` 200 ``{"status":"ok"}``, or 503
  ``{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`` while
  loading, as is every other endpoint except ``/v1/models`` and ``/models``, which answer with
  ``meta`` null (FC-03); ``GET /props`` (``model_path``, ``model_alias``, ``total_slots``,
  ``build_info``); one-token completions on ``POST /v1/chat/completions``,
  ``/chat/completions``, ``/v1/completions``, ``/completion`` and ``/completions``, with
  ``finish_reason`` ``"length"`` (``stop_type`` ``"limit"`` on ``/completion``), streamed as
  server-sent events with ``"stream": true``; 400 for a chat whose ``messages`` is missing
  or not an array; ``GET /slots``, ``POST /tokenize`` and ``/detokenize``; 501 on
  ``/metrics`` and the embeddings endpoints (no ``--metrics``, ``--embeddings``); 404
  otherwise. CORS headers, preflights and ``HEAD`` are ``_fake_server``'s.
- flavor ``mlx`` (mlx_lm.server 0.32.2): ``GET /health`` 200 even while loading, 503
  ``{"status": "unavailable"}`` once the generator is dead; ``GET /v1/models`` lists
  ``--model`` (nothing once dead); completions on ``POST /v1/chat/completions``,
  ``/chat/completions`` and ``/v1/completions`` wait for the load, then answer one token
  (streamed with ``"stream": true``), or 400 for a chat whose ``messages`` is missing or not
  an array, or 404 ``{"error": ...}`` when the body has a ``"model"`` other than
  ``--model`` (FC-09; stricter than the real server, which also takes
  ``"default_model"``) or when the generator is dead (FC-07); 404 ``Not Found`` on any
  other path.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit

import attrs

from . import _fake_replies as replies
from . import _fake_retry as retry
from ._fake_args import HEALTH_FAULTS as HEALTH_FAULTS
from ._fake_args import ROUTER_STATUSES as ROUTER_STATUSES
from ._fake_args import parser as _parser
from ._fake_replies import BUILD_INFO as BUILD_INFO
from ._fake_replies import TOKEN as TOKEN

Flavor: TypeAlias = Literal["llamacpp", "mlx"]


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:  # NaN too
        raise ValueError(f"{attribute.name} must be >= 0, not {value}")


def to_signal_name(value: object) -> object:
    """A signal given as a number or a `signal.Signals` member, as its name (``15`` and
    ``signal.SIGTERM`` give ``"SIGTERM"``); anything else unchanged, for the validator."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            return str(value)
    return value


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
    from its start-up). Field defaults inject nothing. Raises ValueError for a negative
    duration or count, an unknown signal name (names are `signal.Signals` names such as
    ``"SIGABRT"``) or a port outside 1 to 65535.

    Attributes:
        load_s: Answer "loading" for this long, then serve (llamacpp: 503; mlx: completions wait).
        load_forever: Load forever (FC-06; with mlx, health 200 and completions hang: FC-07).
        dead_generator: mlx only: the generation thread dies when the load ends (FC-07).
        crash_after_s: Crash this long after listening, with ``exit_code`` or ``crash_signal``.
        exit_code: The exit status of that crash when ``crash_signal`` is None.
        crash_signal: Kill itself with this signal instead (FC-10: ``"SIGABRT"``).
        crash_on_completion: Kill itself with this signal on a completion (FC-08).
        crash_at_completion: The completion (counting from 1) ``crash_on_completion`` dies on.
        completion_delay_s: Answer each completion only after this long (a slow first token).
        impostor: Claim to serve this model instead (``/v1/models`` id, ``/props``
            ``model_path``): another server's answer on the port (FC-14).
        ignore_sigterm: Ignore SIGTERM; only SIGKILL stops it (FC-05, FC-11).
        hang_completions: Health stays fine, completions never answer (FC-04, FC-07).
        fail_completions_after: The first N completions work, later ones hang.
        extra_port: Also listen (same API) on this port of ``extra_host`` (FC-15 exposure).
        extra_host: The address of ``extra_port``; tests use 127.0.0.1 or 127.0.0.2.
        fork_child: Fork a child that stays alive, in the same process group, holding the
            listening sockets it inherits (FC-12).
        bind_delay_s: Refuse connections (not listening yet) for this long after start.
        health_fault: llamacpp, once loaded: ``GET /health`` never answers (``"hang"``),
            answers 500 (``"500"``), resets the connection (``"reset"``) or answers 503 "no
            slot available" as old builds did (``"busy"``); completions still work.
        health_fault_after_s: ``health_fault`` begins this long after listening.
        router_status: llamacpp: serve as a router (no ``-m``): each ``/models`` entry
            carries a ``status`` object with this ``value`` (``loaded``, ``loading``,
            ``unloaded``), or ``failed``: ``unloaded`` with ``failed`` true and exit code 1.
        outlive_parent: Keep serving when the process that started it dies (an orphan
            left by an earlier supervisor's life, FC-13). By default the fake, and the
            child of ``fork_child``, exit within 0.1 s of that process's death.
        require_api_key: llamacpp: answer every request but ``/health`` with 401 ``Invalid
            API Key``, as llama-server started with ``--api-key`` does to a client without it.
        stream_tokens: A streamed completion says this many tokens (``_fake_streams``).
        stream_token_delay_s: The pause before each token of a stream after the first.
        stream_die_after: Die (SIGKILL) after this many tokens of a stream, mid-answer.
        stream_forever: A stream never ends: a token every ``stream_token_delay_s`` (at
            least 0.05 s) until the client leaves.
        models_status: answer ``GET /v1/models`` with this status and no list (501: an
            mlx_lm.server from before its model list, ``Unsupported method ('GET')``).
        flood_start_bytes: write this many bytes of log lines on stderr before listening.
        flood_line_bytes: the length of each flood line in bytes, newline included.
        flood_bytes_per_s: once listening, write log lines on stderr at about this many
            bytes a second for ever (0: none; ``_fake_flood``).
        fail_status: answer completions ``fail_from``..``fail_to`` (counting served
            completions from 1) with this status (429, 500, 503, ...) and llama-server's
            error body (``_fake_retry``).
        fail_from: the first completion ``fail_status`` answers.
        fail_to: the last one (inclusive); None: every one from ``fail_from`` on.
        reset_at: completion K is answered with a TCP reset (nothing sent).
        cut_at: the completion the cuts below apply to (counting from 1).
        cut_body_after: send only this many bytes of a plain completion's body (its
            ``Content-Length`` says the whole), then close the connection.
        cut_stream_after: send only this many bytes of a streamed completion's body (HTTP
            chunks as written, no last chunk), then close the connection.
    """

    load_s: float = attrs.field(default=0.0, validator=_non_negative)
    load_forever: bool = False
    dead_generator: bool = False
    crash_after_s: float | None = attrs.field(default=None, validator=_non_negative)
    exit_code: int = attrs.field(
        default=1, validator=[attrs.validators.ge(0), attrs.validators.le(255)]
    )
    crash_signal: str | None = attrs.field(
        default=None, converter=to_signal_name, validator=_signal_name
    )
    crash_on_completion: str | None = attrs.field(
        default=None, converter=to_signal_name, validator=_signal_name
    )
    crash_at_completion: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    completion_delay_s: float = attrs.field(default=0.0, validator=_non_negative)
    impostor: str | None = None
    ignore_sigterm: bool = False
    hang_completions: bool = False
    fail_completions_after: int | None = attrs.field(default=None, validator=_non_negative)
    extra_port: int | None = attrs.field(default=None, validator=_port)
    extra_host: str = "127.0.0.1"
    fork_child: bool = False
    bind_delay_s: float = attrs.field(default=0.0, validator=_non_negative)
    health_fault: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(HEALTH_FAULTS))
    )
    health_fault_after_s: float = attrs.field(default=0.0, validator=_non_negative)
    router_status: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(ROUTER_STATUSES))
    )
    outlive_parent: bool = False
    require_api_key: bool = False
    stream_tokens: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    stream_token_delay_s: float = attrs.field(default=0.0, validator=_non_negative)
    stream_die_after: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    stream_forever: bool = False
    models_status: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional([attrs.validators.ge(100), attrs.validators.le(599)]),
    )
    flood_start_bytes: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    flood_line_bytes: int = attrs.field(default=120, validator=attrs.validators.ge(1))
    flood_bytes_per_s: float = attrs.field(default=0.0, validator=_non_negative)
    fail_status: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional([attrs.validators.ge(400), attrs.validators.le(599)]),
    )
    fail_from: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    fail_to: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    reset_at: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    cut_at: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    cut_body_after: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    cut_stream_after: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )

    def args(self) -> tuple[str, ...]:
        """Flags for the fields that differ from their defaults, e.g. ``("--load-s", "0.5")``."""
        out: list[str] = []
        for field in attrs.fields(FakeServerFaults):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            flag = "--" + field.name.replace("_", "-")
            out.extend([flag] if value is True else [flag, str(value)])
        return tuple(out)


def _fits_flavor(options: FakeServerOptions, _: object, value: FakeServerFaults) -> None:
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
    flood_stats: Path | None = None
    faults: FakeServerFaults = attrs.field(factory=FakeServerFaults, validator=_fits_flavor)

    @property
    def model_id(self) -> str:
        """The id ``/v1/models`` lists: the impostor's, else ``alias`` if set, else ``model``."""
        if self.faults.impostor is not None:
            return self.faults.impostor
        return self.alias if self.alias is not None else self.model

    def args(self) -> tuple[str, ...]:
        """The program's command-line arguments (after the program) for these options."""
        out = ["--host", self.host, "--port", str(self.port), "--flavor", self.flavor]
        out += ["--model", self.model]
        named = {"--alias": self.alias, "--request-log": self.request_log}
        named |= {"--pid-file": self.pid_file, "--child-pid-file": self.child_pid_file}
        named |= {"--flood-stats": self.flood_stats}
        for flag, value in named.items():
            out += [] if value is None else [flag, str(value)]
        return (*out, *self.faults.args())


def parse_fake_server_args(argv: Sequence[str]) -> FakeServerOptions:
    """Parse the program's arguments (without the program name) into `FakeServerOptions`.

    The inverse of `FakeServerOptions.args`. Exits with status 2 and a usage message on bad
    arguments (argparse's behaviour).
    """
    parser = _parser()
    # Unknown flags are llama-server's own (-c, -ctk, --threads ...): a drop-in ignores them.
    namespace = vars(parser.parse_known_args(list(argv))[0])
    fault_names = {field.name for field in attrs.fields(FakeServerFaults)}
    try:
        faults = FakeServerFaults(**{k: v for k, v in namespace.items() if k in fault_names})
        return FakeServerOptions(
            **{k: v for k, v in namespace.items() if k not in fault_names}, faults=faults
        )
    except ValueError as exc:
        parser.error(str(exc))


# --- what the server answers -----------------------------------------------------------------


Phase: TypeAlias = Literal["loading", "ready", "dead"]


@attrs.frozen
class Reply:
    """Answer ``status`` with ``document`` as JSON, or a plain ``Not Found`` when it is None;
    ``cut_after``: send that many bytes of the body, then close the connection."""

    status: int
    document: object
    cut_after: int | None = None


@attrs.frozen
class Complete:
    """A completion on ``path`` to serve under the completion faults (``stream``: as
    server-sent events)."""

    path: str
    stream: bool = False


@attrs.frozen
class Stream:
    """Answer 200 ``text/event-stream``: each event a JSON document or a text (``[DONE]``);
    ``cut_after``: close the connection after that many bytes of the body."""

    events: tuple[object, ...]
    cut_after: int | None = None


@attrs.frozen
class AwaitLoad:
    """An mlx completion that came during the load: wait for the load, then decide again."""


@attrs.frozen
class Hang:
    """Never answer (the connection stays open)."""


@attrs.frozen
class Reset:
    """Close the connection at once with a TCP reset, answering nothing."""


@attrs.frozen
class Die:
    """End the process: kill it with ``signal`` (a name), or exit with ``exit_code``."""

    signal: str | None
    exit_code: int = 1


Outcome: TypeAlias = Reply | Stream | Hang | Reset | Die

_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
_LLAMA_404 = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
_LLAMA_COMPLETIONS = frozenset(
    {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completion", "/completions"}
)
_MLX_COMPLETIONS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions"})
_OK = {"status": "ok"}
_NO_KEY = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
_PUBLIC = (("GET", "/health"), ("GET", "/v1/health"))


def decide(
    options: FakeServerOptions, phase: Phase, method: str, target: str, body: bytes
) -> Reply | Hang | Reset | Complete | AwaitLoad:
    """What the server does with one request while in ``phase``, before completion faults."""
    path = urlsplit(target).path
    if options.flavor == "mlx":
        return _decide_mlx(options, phase, (method, path), body)
    return _decide_llamacpp(options, phase, (method, path), body)


def completion_fate(
    options: FakeServerOptions, path: str, number: int, *, stream: bool = False
) -> Outcome:
    """What the ``number``-th served completion (counting from 1) meets under the faults;
    ``stream``: answered as server-sent events."""
    faults = options.faults
    if faults.crash_on_completion is not None and number >= faults.crash_at_completion:
        return Die(faults.crash_on_completion)
    if retry.resets(faults, number):
        return Reset()
    if (status := retry.fails_with(faults, number)) is not None:
        return Reply(status, retry.error_document(status))
    limit = faults.fail_completions_after
    if faults.hang_completions or (limit is not None and number > limit):
        return Hang()
    cut = retry.cut_after(faults, number, stream=stream)
    if stream:
        events = replies.completion_events(options.flavor, options.model_id, path, number)
        return Stream(tuple(events), cut)
    return Reply(200, replies.completion(options.flavor, options.model_id, path, number), cut)


def _decide_llamacpp(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> Reply | Hang | Reset | Complete:
    method, path = route
    if options.faults.require_api_key and route not in _PUBLIC:
        return Reply(401, _NO_KEY)  # the real server checks the key before anything else
    if route in (("GET", "/v1/models"), ("GET", "/models")):
        if options.faults.models_status is not None:
            return Reply(options.faults.models_status, replies.NO_LIST)
        listed = replies.llamacpp_models(options.model_id, loaded=phase != "loading")
        return Reply(200, replies.as_router(listed, options.faults.router_status))
    if phase == "loading":
        return Reply(503, _LOADING)
    if route in (("GET", "/health"), ("GET", "/v1/health")):
        return _health(options.faults.health_fault)
    if route == ("GET", "/props"):
        return Reply(200, replies.props(options.model_id, options.faults.impostor or options.model))
    if (other := replies.llamacpp_other(route, body)) is not None:
        return Reply(*other)
    if method == "POST" and path in _LLAMA_COMPLETIONS:
        return _completion("llamacpp", path, body)
    return Reply(404, _LLAMA_404)


def _completion(flavor: Flavor, path: str, body: bytes) -> Reply | Complete:
    """A completion to serve, or the 500/400 its body earns (not JSON, bad ``messages``)."""
    if (problem := replies.json_problem(body)) is not None:
        return Reply(*replies.bad_json(flavor, problem))
    chat = path in ("/v1/chat/completions", "/chat/completions")
    if chat and (refused := replies.chat_problem(flavor, body)) is not None:
        return Reply(*refused)
    return Complete(path, replies.wants_stream(body))


def _decide_mlx(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> Reply | Complete | AwaitLoad:
    method, path = route
    if route == ("GET", "/health"):
        return Reply(503, {"status": "unavailable"}) if phase == "dead" else Reply(200, _OK)
    if route == ("GET", "/v1/models"):
        if options.faults.models_status is not None:
            return Reply(options.faults.models_status, replies.NO_LIST)
        served = options.faults.impostor or options.model
        entry = {"id": served, "object": "model", "created": int(time.time())}
        return Reply(200, {"object": "list", "data": [] if phase == "dead" else [entry]})
    if method != "POST" or path not in _MLX_COMPLETIONS:
        return Reply(404, None)
    checked = _completion("mlx", path, body)
    if isinstance(checked, Reply):
        return checked
    wanted = replies.model_field(body)
    if wanted is not None and wanted != options.model:
        return Reply(404, {"error": f"model {wanted!r} is not the served --model (FC-09)"})
    if phase == "dead":
        return Reply(404, {"error": "generation thread died"})
    return AwaitLoad() if phase == "loading" else checked


def _health(fault: str | None) -> Reply | Hang | Reset:
    """A loaded llama-server's ``/health`` under ``health_fault``."""
    match fault:
        case "hang":
            return Hang()
        case "reset":
            return Reset()
        case "500":
            return Reply(500, {"error": {"code": 500, "message": "boom", "type": "server_error"}})
        case "busy":  # builds from PR #5548 to PR #9056
            return Reply(
                503, {"status": "no slot available", "slots_idle": 0, "slots_processing": 4}
            )
    return Reply(200, _OK)
