"""The steps of a fault timeline, each a frozen value (pure).

Durations are float seconds counted from the moment the fake listens; request numbers
count completions from 1 (health probes and model lists are not counted). Each field is
checked when the step is made (``_step_checks``): a bad value raises `StepFieldError`, a
ValueError naming the field. `Timeline` (``_timeline``) gathers them.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from ._step_checks import (
    StepFieldError,
    at_least,
    beyond_loopback_host,
    duration,
    keep_alive,
    signal_name,
    to_signal_name,
    within,
)

FakeKind: TypeAlias = Literal["llamacpp", "mlx", "ollama"]

RUNNER_TIMEOUT = "timed out waiting for llama runner to start - progress 0.00 - "
"""The error text of Ollama's load timeout (FC-19), as its 500 reply says it."""


# --- the llama-server and mlx_lm.server fakes ----------------------------------------------


@attrs.frozen(kw_only=True)
class Status503:
    """llama-server answers 503 "Loading model" (``/v1/models`` 200 with ``meta`` null,
    FC-03) for ``for_s`` seconds, or forever when None (FC-06), then serves."""

    for_s: float | None = attrs.field(default=None, validator=duration)


@attrs.frozen(kw_only=True)
class HealthLies:
    """``/health`` answers 200 but no completion ever answers (llama-server: FC-04; an older
    or deadlocked mlx_lm.server, which says 200 while loading forever: FC-07)."""


@attrs.frozen(kw_only=True)
class Hang:
    """The first ``after_requests`` completions answer, every later one hangs (health stays
    fine, the connection stays open: FC-04, FC-05)."""

    after_requests: int = attrs.field(default=0, validator=at_least(0))


@attrs.frozen(kw_only=True)
class CrashAt:
    """The server crashes: on completion number ``request`` (it dies of ``signal``,
    SIGKILL when unset, as the OOM killer does: FC-08, FC-10), or ``after_s`` seconds after
    listening (of ``signal``, else exiting with ``exit_code``). Give exactly one of the two.
    Signals are names such as ``"SIGABRT"``."""

    request: int | None = attrs.field(default=None, validator=at_least(1))
    after_s: float | None = attrs.field(default=None, validator=duration)
    signal: str | None = attrs.field(default=None, converter=to_signal_name, validator=signal_name)
    exit_code: int = attrs.field(default=1, validator=within(0, 255))

    def __attrs_post_init__(self) -> None:
        if (self.request is None) == (self.after_s is None):
            raise StepFieldError(None, "CrashAt needs exactly one of request and after_s")
        if self.request is not None and self.exit_code != 1:
            raise StepFieldError(
                "exit_code", "a crash on a request dies of a signal: set signal, not exit_code"
            )


@attrs.frozen(kw_only=True)
class SlowFirstToken:
    """Every completion answers only ``delay_s`` seconds after it arrived."""

    delay_s: float = attrs.field(validator=duration)


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
    (None: a free one chosen when the timeline is applied): FC-15. ``host`` is ``"0.0.0.0"``
    or ``"::"`` (all interfaces) or a loopback address other than the fake's own 127.0.0.1
    (``"127.0.0.2"``, ``"::1"``): addresses a fake can bind on any machine."""

    host: str = attrs.field(default="0.0.0.0", validator=beyond_loopback_host)
    port: int | None = attrs.field(default=None, validator=within(1, 65535))


@attrs.frozen(kw_only=True)
class ImpostorOnPort:
    """Whatever answers on the port serves ``model``, not the one it was asked to
    (``/v1/models`` id and ``/props`` ``model_path``): a foreign server (FC-14)."""

    model: str = "someone-else.gguf"


@attrs.frozen(kw_only=True)
class ListenLate:
    """Connections are refused for ``after_s`` seconds after start (not listening yet)."""

    after_s: float = attrs.field(validator=duration)


@attrs.frozen(kw_only=True)
class ForkedChild:
    """The server forks a child that stays alive in its process group, holding its
    listening sockets (the wrapper that does not ``exec``: FC-12)."""


@attrs.frozen(kw_only=True)
class StreamDies:
    """A streamed completion says ``tokens`` tokens, ``every_s`` apart, and the server dies
    (SIGKILL) after ``after_tokens`` of them, mid-answer (``_fake_streams``)."""

    after_tokens: int = attrs.field(default=1, validator=at_least(1))
    tokens: int = attrs.field(default=4, validator=at_least(1))
    every_s: float = attrs.field(default=0.0, validator=duration)


@attrs.frozen(kw_only=True)
class EndlessStream:
    """A streamed completion never ends: a token every ``every_s`` (at least 0.05 s) until
    the client leaves."""

    every_s: float = attrs.field(default=0.05, validator=duration)


# --- the Ollama fake -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LoadTimeout:
    """Every load fails after ``after_s`` seconds with HTTP 500 and Ollama's runner
    timeout (FC-19); nothing is loaded."""

    after_s: float = attrs.field(default=0.0, validator=duration)
    message: str = RUNNER_TIMEOUT


@attrs.frozen(kw_only=True)
class SlowLoad:
    """Every load takes ``for_s`` seconds; a client that hangs up first aborts it (FC-18)."""

    for_s: float = attrs.field(validator=duration)


@attrs.frozen(kw_only=True)
class UnloadLingers:
    """An unloaded model stays in ``/api/ps`` for ``for_s`` seconds (FC-21)."""

    for_s: float = attrs.field(validator=duration)


@attrs.frozen(kw_only=True)
class ForeignModelLoaded:
    """``model`` (a pulled one) was loaded by someone else before the fake started, kept
    forever."""

    model: str


@attrs.frozen(kw_only=True)
class ForeignKeepAlive:
    """``after_s`` seconds after the fake started, a foreign client asks for ``model`` with
    its own ``keep_alive`` (``"5m"``): the expiry in ``/api/ps`` changes (FC-20). Played
    by the process fixture from outside, as a real foreign client would. ``keep_alive`` is
    what Ollama accepts: whole seconds (``300``, ``"300"``; negative: forever) or a duration
    (``"5m"``)."""

    model: str = "tiny:latest"
    keep_alive: str | int = attrs.field(default="5m", validator=keep_alive)
    after_s: float = attrs.field(default=0.0, validator=duration)


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
    | StreamDies
    | EndlessStream
)
OllamaStep: TypeAlias = (
    LoadTimeout | SlowLoad | UnloadLingers | ForeignModelLoaded | ForeignKeepAlive
)
Step: TypeAlias = ServerStep | OllamaStep

SERVER_STEPS: tuple[type[ServerStep], ...] = ServerStep.__args__
OLLAMA_STEPS: tuple[type[OllamaStep], ...] = OllamaStep.__args__
