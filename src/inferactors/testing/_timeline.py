"""Faults as data: the steps of an incident, gathered in a `Timeline`.

A test reads like the incident it reproduces::

    Timeline.of(Status503(for_s=5.0), CrashAt(request=3))

Each step is a frozen value; durations are float seconds counted from the moment the fake
listens, request numbers count completions from 1 (health probes and model lists are not
counted). `Timeline.server_faults` turns the steps into the fake llama-server's or fake
mlx_lm.server's `FakeServerFaults` (its command-line flags), `Timeline.ollama_config` into
the fake Ollama's `FakeOllamaConfig`; a step that the chosen fake cannot play raises
`InvalidConfig` naming it. Reading timelines from TOML, JSON or a dict is
``_timeline_data``; the field cases ready by name are ``_field_cases``.
"""

from __future__ import annotations

import socket
from typing import Any, Literal, TypeAlias

import attrs

from .._errors import InvalidConfig
from ._fake_faults import FakeServerFaults, Flavor
from ._fake_ollama_api import FakeOllamaConfig

FakeKind: TypeAlias = Literal["llamacpp", "mlx", "ollama"]

RUNNER_TIMEOUT = "timed out waiting for llama runner to start - progress 0.00 - "
"""The error text of Ollama's load timeout (FC-19), as its 500 reply says it."""


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:  # NaN too
        raise ValueError(f"{attribute.name} must be >= 0, not {value}")


# --- the llama-server and mlx_lm.server fakes ----------------------------------------------


@attrs.frozen(kw_only=True)
class Status503:
    """llama-server answers 503 "Loading model" (``/v1/models`` 200 with ``meta`` null,
    FC-03) for ``for_s`` seconds, or forever when None (FC-06), then serves."""

    for_s: float | None = attrs.field(default=None, validator=_non_negative)


@attrs.frozen(kw_only=True)
class HealthLies:
    """``/health`` answers 200 but no completion ever answers (llama-server: FC-04; an older
    or deadlocked mlx_lm.server, which says 200 while loading forever: FC-07)."""


@attrs.frozen(kw_only=True)
class Hang:
    """The first ``after_requests`` completions answer, every later one hangs (health stays
    fine, the connection stays open: FC-04, FC-05)."""

    after_requests: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen(kw_only=True)
class CrashAt:
    """The server crashes: on completion number ``request`` (it dies of ``signal``,
    SIGKILL when unset, as the OOM killer does: FC-08, FC-10), or ``after_s`` seconds after
    listening (of ``signal``, else exiting with ``exit_code``). Give exactly one of the two.
    Signals are names such as ``"SIGABRT"``."""

    request: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    after_s: float | None = attrs.field(default=None, validator=_non_negative)
    signal: str | None = None
    exit_code: int = attrs.field(
        default=1, validator=[attrs.validators.ge(0), attrs.validators.le(255)]
    )

    def __attrs_post_init__(self) -> None:
        if (self.request is None) == (self.after_s is None):
            raise ValueError("CrashAt needs exactly one of request and after_s")
        if self.request is not None and self.exit_code != 1:
            raise ValueError("a crash on a request dies of a signal: set signal, not exit_code")


@attrs.frozen(kw_only=True)
class SlowFirstToken:
    """Every completion answers only ``delay_s`` seconds after it arrived."""

    delay_s: float = attrs.field(validator=_non_negative)


@attrs.frozen(kw_only=True)
class IgnoreSigterm:
    """SIGTERM is ignored; only SIGKILL stops the server (FC-05, FC-11)."""


@attrs.frozen(kw_only=True)
class DeadGenerator:
    """mlx_lm.server 0.32.2 whose generation thread died at load: ``/health`` 503, no
    models, completions 404 at once; the process stays alive (FC-07)."""


@attrs.frozen(kw_only=True)
class BindBeyondLoopback:
    """The server also listens on ``host`` (all interfaces by default), port ``port``
    (None: a free one chosen when the timeline is applied): FC-15."""

    host: str = "0.0.0.0"
    port: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional([attrs.validators.ge(1), attrs.validators.le(65535)]),
    )


@attrs.frozen(kw_only=True)
class ImpostorOnPort:
    """Whatever answers on the port serves ``model``, not the one it was asked to
    (``/v1/models`` id and ``/props`` ``model_path``): a foreign server (FC-14)."""

    model: str = "someone-else.gguf"


@attrs.frozen(kw_only=True)
class ListenLate:
    """Connections are refused for ``after_s`` seconds after start (not listening yet)."""

    after_s: float = attrs.field(validator=_non_negative)


@attrs.frozen(kw_only=True)
class ForkedChild:
    """The server forks a child that stays alive in its process group, holding its
    listening sockets (the wrapper that does not ``exec``: FC-12)."""


# --- the Ollama fake -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LoadTimeout:
    """Every load fails after ``after_s`` seconds with HTTP 500 and Ollama's runner
    timeout (FC-19); nothing is loaded."""

    after_s: float = attrs.field(default=0.0, validator=_non_negative)
    message: str = RUNNER_TIMEOUT


@attrs.frozen(kw_only=True)
class SlowLoad:
    """Every load takes ``for_s`` seconds; a client that hangs up first aborts it (FC-18)."""

    for_s: float = attrs.field(validator=_non_negative)


@attrs.frozen(kw_only=True)
class UnloadLingers:
    """An unloaded model stays in ``/api/ps`` for ``for_s`` seconds (FC-21)."""

    for_s: float = attrs.field(validator=_non_negative)


@attrs.frozen(kw_only=True)
class ForeignModelLoaded:
    """``model`` was loaded by someone else before the fake started, kept forever."""

    model: str


@attrs.frozen(kw_only=True)
class ForeignKeepAlive:
    """``after_s`` seconds after the fake started, a foreign client asks for ``model`` with
    its own ``keep_alive`` (``"5m"``): the expiry in ``/api/ps`` changes (FC-20). Played
    by the process fixture from outside, as a real foreign client would."""

    model: str = "tiny:latest"
    keep_alive: str | int = "5m"
    after_s: float = attrs.field(default=0.0, validator=_non_negative)


ServerStep: TypeAlias = (
    Status503
    | HealthLies
    | Hang
    | CrashAt
    | SlowFirstToken
    | IgnoreSigterm
    | DeadGenerator
    | BindBeyondLoopback
    | ImpostorOnPort
    | ListenLate
    | ForkedChild
)
OllamaStep: TypeAlias = (
    LoadTimeout | SlowLoad | UnloadLingers | ForeignModelLoaded | ForeignKeepAlive
)
Step: TypeAlias = ServerStep | OllamaStep

SERVER_STEPS: tuple[type[ServerStep], ...] = ServerStep.__args__
OLLAMA_STEPS: tuple[type[OllamaStep], ...] = OllamaStep.__args__


@attrs.frozen
class Timeline:
    """The steps of one incident, in the order they are told (each keeps its own clock).

    Build one with ``Timeline.of(step, ...)``; an empty timeline injects nothing.
    """

    steps: tuple[Step, ...] = ()

    @classmethod
    def of(cls, *steps: Step) -> Timeline:
        """``Timeline.of(Status503(for_s=5.0), CrashAt(request=3))``."""
        return cls(tuple(steps))

    def kind(self) -> Literal["server", "ollama", "none"]:
        """Which fake plays it: ``"server"`` (llama-server, mlx_lm.server), ``"ollama"``, or
        ``"none"`` for an empty timeline. Raises InvalidConfig when it mixes the two."""
        server = any(isinstance(step, SERVER_STEPS) for step in self.steps)
        ollama = any(isinstance(step, OLLAMA_STEPS) for step in self.steps)
        if server and ollama:
            raise InvalidConfig("a timeline mixes server and Ollama steps: split it in two")
        return "server" if server else "ollama" if ollama else "none"

    def server_faults(self, flavor: Flavor = "llamacpp") -> FakeServerFaults:
        """The fake server's faults for these steps (a `BindBeyondLoopback` without a port
        gets a free one now). Raises InvalidConfig naming a step the fake of ``flavor``
        cannot play, or two steps that contradict each other."""
        fields: dict[str, object] = {}
        for step in self.steps:
            for name, value in _server_fields(step, flavor).items():
                if name in fields and fields[name] != value:
                    raise InvalidConfig(f"{_name(step)} contradicts an earlier step ({name})")
                fields[name] = value
        try:
            return FakeServerFaults(**fields)  # type: ignore[arg-type]
        except ValueError as error:
            raise InvalidConfig(f"timeline: {error}") from None

    def ollama_config(self, models: tuple[str, ...] = ("tiny:latest",)) -> FakeOllamaConfig:
        """The fake Ollama's configuration for these steps, serving ``models``. Raises
        InvalidConfig for a server step."""
        fields: dict[str, Any] = {"models": models}
        for step in self.steps:
            fields |= _ollama_fields(step)
        preloaded = tuple(s.model for s in self.steps if isinstance(s, ForeignModelLoaded))
        return FakeOllamaConfig(**(fields | {"preloaded": preloaded}))

    def foreign_keep_alives(self) -> tuple[ForeignKeepAlive, ...]:
        """The steps a process fixture plays from outside, by their time."""
        found = [step for step in self.steps if isinstance(step, ForeignKeepAlive)]
        return tuple(sorted(found, key=lambda step: step.after_s))


def _name(step: object) -> str:
    return type(step).__name__


def _server_fields(step: Step, flavor: Flavor) -> dict[str, object]:
    match step:
        case Status503(for_s=for_s):
            if flavor == "mlx":
                raise InvalidConfig(
                    "Status503: mlx_lm.server answers 200 while loading; "
                    "use HealthLies or DeadGenerator"
                )
            return {"load_forever": True} if for_s is None else {"load_s": for_s}
        case HealthLies():
            return {"load_forever": True} if flavor == "mlx" else {"hang_completions": True}
        case Hang(after_requests=count):
            return {"hang_completions": True} if count == 0 else {"fail_completions_after": count}
        case CrashAt(request=int(number), signal=name):
            return {"crash_on_completion": name or "SIGKILL", "crash_at_completion": number}
        case CrashAt(after_s=after_s, signal=name, exit_code=code):
            return {"crash_after_s": after_s, "crash_signal": name, "exit_code": code}
        case SlowFirstToken(delay_s=delay_s):
            return {"completion_delay_s": delay_s}
        case IgnoreSigterm():
            return {"ignore_sigterm": True}
        case DeadGenerator():
            if flavor != "mlx":
                raise InvalidConfig("DeadGenerator is an mlx_lm.server fault: use flavor 'mlx'")
            return {"dead_generator": True}
        case BindBeyondLoopback(host=host, port=port):
            return {"extra_host": host, "extra_port": port or _free_port(host)}
        case ImpostorOnPort(model=model):
            return {"impostor": model}
        case ListenLate(after_s=after_s):
            return {"bind_delay_s": after_s}
        case ForkedChild():
            return {"fork_child": True}
    raise InvalidConfig(f"{_name(step)} is an Ollama fault: the fake Ollama plays it")


def _ollama_fields(step: Step) -> dict[str, Any]:
    match step:
        case LoadTimeout(after_s=after_s, message=message):
            return {"load_delay_s": after_s, "load_error": message}
        case SlowLoad(for_s=for_s):
            return {"load_delay_s": for_s}
        case UnloadLingers(for_s=for_s):
            return {"unload_linger_s": for_s}
        case ForeignModelLoaded() | ForeignKeepAlive():
            return {}
    raise InvalidConfig(f"{_name(step)} is a llama-server/mlx_lm.server fault, not Ollama's")


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
