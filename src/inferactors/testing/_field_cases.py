"""The field cases (real failures reported against peer systems) as ready timelines.

``field_case("FC-07")`` is the timeline of that incident; `FIELD_CASES` says which fake
plays each one and what the incident was; `NOT_REPRODUCIBLE` says, for each case a fake
server cannot reproduce, why. Each case names the upstream issue it comes from.
"""

from __future__ import annotations

import attrs

from .._errors import InvalidConfig
from ._timeline import (
    BindBeyondLoopback,
    CrashAt,
    DeadGenerator,
    FakeKind,
    ForeignKeepAlive,
    ForkedChild,
    Hang,
    IgnoreSigterm,
    ImpostorOnPort,
    LoadTimeout,
    SlowLoad,
    Status503,
    Timeline,
    UnloadLingers,
)


@attrs.frozen
class FieldCase:
    """One reproducible field case: its ``id``, the fake that plays it, what happened."""

    id: str
    fake: FakeKind
    incident: str
    timeline: Timeline


def _case(id: str, fake: FakeKind, incident: str, *steps: object) -> FieldCase:
    return FieldCase(id, fake, incident, Timeline.of(*steps))  # type: ignore[arg-type]


FIELD_CASES: dict[str, FieldCase] = {
    case.id: case
    for case in (
        _case(
            "FC-01",
            "llamacpp",
            "llama-swap #92: a load longer than the health timeout",
            Status503(for_s=30.0),
        ),
        _case(
            "FC-02",
            "llamacpp",
            "llama-swap #289: killed mid-load, restarted in a loop",
            Status503(for_s=600.0),
        ),
        _case(
            "FC-03", "llamacpp", "llama-swap #146: /v1/models 200 while /health is 503", Status503()
        ),
        _case("FC-04", "llamacpp", "llama.cpp #13281: /health OK, every completion hangs", Hang()),
        _case(
            "FC-05",
            "llamacpp",
            "llama.cpp #27388: stalled decode, only SIGKILL works",
            IgnoreSigterm(),
            Hang(),
        ),
        _case("FC-06", "llamacpp", "llama.cpp #15128: 503 'Loading model' forever", Status503()),
        _case(
            "FC-07",
            "mlx",
            "mlx_lm.server: the generation thread died (0.32.2: /health 503, "
            "completions 404; older: /health 200 and completions hang, see HealthLies)",
            DeadGenerator(),
        ),
        _case(
            "FC-08",
            "llamacpp",
            "mlx-lm #98: killed (OOM) on the first request",
            CrashAt(request=1, signal="SIGKILL"),
        ),
        _case(
            "FC-09",
            "mlx",
            "mlx-lm #1892: a request's model field names another model "
            "(the mlx fake always answers 404 to a model other than --model)",
        ),
        _case(
            "FC-10",
            "llamacpp",
            "llama-swap #155: crashed mid-stream, 502 until a request",
            CrashAt(request=1, signal="SIGABRT"),
        ),
        _case(
            "FC-11",
            "llamacpp",
            "llama-swap #38: SIGTERM ignored, 'timed out waiting to stop'",
            IgnoreSigterm(),
        ),
        _case(
            "FC-12",
            "llamacpp",
            "llama-swap #804: a forking wrapper could not be stopped",
            ForkedChild(),
        ),
        _case(
            "FC-14",
            "llamacpp",
            "llama.cpp #26822: a foreign server answers on the port",
            ImpostorOnPort(),
        ),
        _case(
            "FC-15",
            "llamacpp",
            "llama-swap #739: listening on all interfaces",
            BindBeyondLoopback(),
        ),
        _case(
            "FC-18",
            "ollama",
            "ollama #7408: a client that hangs up aborts the load",
            SlowLoad(for_s=30.0),
        ),
        _case(
            "FC-19",
            "ollama",
            "ollama #4131: 'timed out waiting for llama runner to start'",
            LoadTimeout(),
        ),
        _case(
            "FC-20",
            "ollama",
            "ollama #5272: a foreign keep_alive replaced ours",
            ForeignKeepAlive(model="tiny:latest", keep_alive="5m", after_s=1.0),
        ),
        _case(
            "FC-21",
            "ollama",
            "Ollama sched.go: the runner lingers in /api/ps after unload",
            UnloadLingers(for_s=3.0),
        ),
    )
}
"""Every field case a fake can reproduce, by id."""

NOT_REPRODUCIBLE: dict[str, str] = {
    "FC-13": "the supervisor is SIGKILLed, not the server: kill your own process in the test",
    "FC-16": "the fakes stream a single token, so a long generation with a TTL has nothing "
    "to count",
    "FC-17": "the fakes stream a single token, so there are no gaps between tokens",
    "FC-22": "about what the supervisor records (stop reason apart from exit status); "
    "CrashAt gives the crash to compare with a requested stop",
}
"""The field cases no fake server reproduces, with why."""


def field_case(case_id: str) -> Timeline:
    """The timeline of field case ``case_id`` (``"FC-07"``; ``"fc07"`` works too).

    Raises:
        InvalidConfig: an unknown id, or one in `NOT_REPRODUCIBLE` (the message says why).
    """
    return field_case_info(case_id).timeline


def field_case_info(case_id: str) -> FieldCase:
    """The `FieldCase` of ``case_id``: its timeline, the fake that plays it, the incident.

    Raises:
        InvalidConfig: as `field_case`.
    """
    digits = "".join(ch for ch in case_id if ch.isdigit())
    key = f"FC-{int(digits):02d}" if digits else case_id
    if key in NOT_REPRODUCIBLE:
        raise InvalidConfig(f"{key} is not reproducible with a fake: {NOT_REPRODUCIBLE[key]}")
    if key not in FIELD_CASES:
        raise InvalidConfig(f"unknown field case {case_id!r} (known: FC-01 to FC-22)")
    return FIELD_CASES[key]
