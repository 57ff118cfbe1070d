"""The fake inference server's options and faults, pure: the program's flags as values.

`FakeServerFaults` and `FakeServerOptions` are the program's flags as values (each field is
its flag with ``-`` for ``_``); `FakeServerOptions.args` writes them and
`parse_fake_server_args` reads them back (the two are inverses). What the server answers
under them is ``_fake_answers`` (`decide`, `completion_fate`); the program that runs them,
with its sockets, signals and files, is ``_fake_server``. No I/O here.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

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
        extra_after_s: Open ``extra_port`` only this long after listening (a server that
            binds beyond loopback long after it came up).
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
    extra_after_s: float = attrs.field(default=0.0, validator=_non_negative)
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
