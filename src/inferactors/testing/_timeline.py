"""Faults as data: the steps of an incident, gathered in a `Timeline`.

A test reads like the incident it reproduces::

    Timeline.of(Status503(for_s=5.0), CrashAt(request=3))

Each step is a frozen value (``_steps``, re-exported here), checked when it is made;
durations are float seconds counted from the moment the fake listens, request numbers count
completions from 1 (health probes and model lists are not counted). A timeline refuses two
steps that contradict when it is made. `Timeline.server_faults` turns the steps into the
fake llama-server's or fake mlx_lm.server's `FakeServerFaults` (its command-line flags),
`Timeline.ollama_config` into the fake Ollama's `FakeOllamaConfig`; a step that the chosen
fake cannot play raises `InvalidConfig` naming it, and `Timeline.played_by` keeps the
steps one fake plays (`players` says which). Reading timelines from TOML, JSON or a dict is
``_timeline_data``; the field cases ready by name are ``_field_cases``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any, Literal

import attrs

from .._config.ollama_names import same_ollama_name
from .._errors import InvalidConfig
from ._fake_faults import FakeServerFaults, Flavor
from ._fake_ollama_api import FakeOllamaConfig
from ._steps import OLLAMA_STEPS as OLLAMA_STEPS
from ._steps import RUNNER_TIMEOUT as RUNNER_TIMEOUT
from ._steps import SERVER_STEPS as SERVER_STEPS
from ._steps import BindBeyondLoopback as BindBeyondLoopback
from ._steps import CrashAt as CrashAt
from ._steps import DeadGenerator as DeadGenerator
from ._steps import EndlessStream as EndlessStream
from ._steps import FakeKind as FakeKind
from ._steps import ForeignKeepAlive as ForeignKeepAlive
from ._steps import ForeignModelLoaded as ForeignModelLoaded
from ._steps import ForkedChild as ForkedChild
from ._steps import Hang as Hang
from ._steps import HealthLies as HealthLies
from ._steps import IgnoreSigterm as IgnoreSigterm
from ._steps import ImpostorOnPort as ImpostorOnPort
from ._steps import ListenLate as ListenLate
from ._steps import LoadTimeout as LoadTimeout
from ._steps import OllamaStep as OllamaStep
from ._steps import ServerStep as ServerStep
from ._steps import SlowFirstToken as SlowFirstToken
from ._steps import SlowLoad as SlowLoad
from ._steps import Status503 as Status503
from ._steps import Step as Step
from ._steps import StreamDies as StreamDies
from ._steps import UnloadLingers as UnloadLingers


@attrs.frozen
class Timeline:
    """The steps of one incident, in the order they are told (each keeps its own clock).

    Build one with ``Timeline.of(step, ...)``; an empty timeline injects nothing. A fault
    appears once (`ForeignKeepAlive` and `ForeignModelLoaded` of different models may
    repeat; `CrashAt` once on a request and once after a time): two that contradict
    raise InvalidConfig naming the second, e.g. ``$.steps[1]: Status503 contradicts
    $.steps[0]``.
    """

    steps: tuple[Step, ...] = ()

    def __attrs_post_init__(self) -> None:
        _check_no_contradiction(self.steps)

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

    def played_by(self, kind: FakeKind) -> Timeline:
        """The steps the fake of ``kind`` can play (see `players`), the others left out."""
        return Timeline(tuple(step for step in self.steps if kind in players(step)))

    def server_faults(self, flavor: Flavor = "llamacpp") -> FakeServerFaults:
        """The fake server's faults for these steps (a `BindBeyondLoopback` without a port
        gets a free one now). Raises InvalidConfig naming a step the fake of ``flavor``
        cannot play."""
        fields = _merged(("", step, _server_fields(step, flavor)) for step in self.steps)
        if fields.get("extra_host") is not None and fields.get("extra_port") is None:
            fields["extra_port"] = _free_port(str(fields["extra_host"]))
        try:
            return FakeServerFaults(**fields)
        except ValueError as error:
            raise InvalidConfig(f"timeline: {error}") from None

    def ollama_config(self, models: tuple[str, ...] = ("tiny:latest",)) -> FakeOllamaConfig:
        """The fake Ollama's configuration for these steps, serving ``models``. Raises
        InvalidConfig for a server step, or a `ForeignModelLoaded` or `ForeignKeepAlive` of a
        model not among ``models`` (a real Ollama cannot load a model it has not pulled)."""
        fields = _merged(("", step, _ollama_fields(step)) for step in self.steps)
        for step in self.steps:
            if isinstance(step, ForeignModelLoaded | ForeignKeepAlive):
                check_pulled(step.model, models, _name(step))
        preloaded = tuple(s.model for s in self.steps if isinstance(s, ForeignModelLoaded))
        return FakeOllamaConfig(**(fields | {"models": models, "preloaded": preloaded}))

    def foreign_keep_alives(self) -> tuple[ForeignKeepAlive, ...]:
        """The steps a process fixture plays from outside, by their time."""
        found = [step for step in self.steps if isinstance(step, ForeignKeepAlive)]
        return tuple(sorted(found, key=lambda step: step.after_s))


def players(step: Step) -> tuple[FakeKind, ...]:
    """The fakes that can play ``step``: `Status503` only llama-server (mlx_lm.server answers
    200 while loading), `DeadGenerator` only mlx_lm.server, the other server steps both,
    the Ollama steps the fake Ollama."""
    if isinstance(step, OLLAMA_STEPS):
        return ("ollama",)
    if isinstance(step, Status503):
        return ("llamacpp",)
    if isinstance(step, DeadGenerator):
        return ("mlx",)
    return ("llamacpp", "mlx")


def check_pulled(model: str, models: tuple[str, ...], what: str = "the model") -> None:
    """Raise InvalidConfig unless ``model`` is one of the pulled ``models`` (Ollama's names:
    ``"tiny"`` is ``"tiny:latest"``)."""
    if not any(same_ollama_name(model, pulled) for pulled in models):
        raise InvalidConfig(
            f"{what}: model {model!r} is not pulled in the fake Ollama (pulled: "
            f"{', '.join(models) or 'none'}), so no client can load it"
        )


def _once_key(step: Step) -> object:
    """Steps with the same key contradict each other (None: the step may repeat)."""
    match step:
        case ForeignKeepAlive():
            return None
        case ForeignModelLoaded(model=model):
            return (ForeignModelLoaded, model)
        case CrashAt(request=request):
            return (CrashAt, request is None)
    return type(step)


def _check_no_contradiction(steps: tuple[Step, ...]) -> None:
    seen: dict[object, int] = {}
    for index, step in enumerate(steps):
        key = _once_key(step)
        if key is not None and key in seen:
            raise InvalidConfig(
                f"$.steps[{index}]: {_name(step)} contradicts $.steps[{seen[key]}] (a timeline "
                "plays each fault once)"
            )
        if key is not None:
            seen[key] = index
    for kind in ("llamacpp", "mlx", "ollama"):
        _merged(
            (f"$.steps[{index}]", step, _fields(step, kind))
            for index, step in enumerate(steps)
            if kind in players(step)
        )


def _fields(step: Step, kind: str) -> dict[str, object]:
    if kind == "ollama":
        return _ollama_fields(step)
    return _server_fields(step, "mlx" if kind == "mlx" else "llamacpp")


def _merged(found: Iterable[tuple[str, Step, dict[str, object]]]) -> dict[str, Any]:
    """The fields of every step (found as ``(where, step, fields)``), refusing two steps
    that set one field differently."""
    fields: dict[str, object] = {}
    first: dict[str, str] = {}
    for where, step, values in found:
        for name, value in values.items():
            if name in fields and fields[name] != value:
                said = f"{_name(step)} contradicts {first[name] or 'an earlier step'} ({name})"
                raise InvalidConfig(f"{where}: {said}" if where else said)
            fields[name] = value
            first.setdefault(name, where)
    return fields


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
            return {"extra_host": host, "extra_port": port}
        case ImpostorOnPort(model=model):
            return {"impostor": model}
        case ListenLate(after_s=after_s):
            return {"bind_delay_s": after_s}
        case ForkedChild():
            return {"fork_child": True}
        case StreamDies(after_tokens=after, tokens=tokens, every_s=every_s):
            return {
                "stream_die_after": after,
                "stream_tokens": max(tokens, after),
                "stream_token_delay_s": every_s,
            }
        case EndlessStream(every_s=every_s):
            return {"stream_forever": True, "stream_token_delay_s": every_s}
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
