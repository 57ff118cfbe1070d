"""Instance states and the mapping from a probe report to a status (pure; no I/O).

Source: seed-behaviour.md section 4, ``status`` and ``map_report``; checklist items 23, 24,
42 and 52. A status is a snapshot: it never raises and it is never stale by more than one
probe.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from ._matching import lists
from ._probe_parse import Loading, ServerReport, Unhealthy, Unreachable, Up


class InstanceState(enum.Enum):
    """The reference's five states; ``detail`` in `InstanceStatus` says the rest."""

    LOADED = "loaded"
    RUNNING = "running"
    DEGRADED = "degraded"
    EXITED = "exited"
    UNKNOWN = "unknown"


@attrs.frozen
class InstanceStatus:
    """What `InferRuntime.status` answers.

    Attributes:
        state: one of `InstanceState`.
        detail: why, in words (``"loading model"``, ``"server process exited"``), or None.
        exit_code: the last process's exit status when it exited with one.
        stop_reason: why the last process ended (``"requested"``, ``"crash"``, ...), kept
            apart from the exit status (FC-22).
        pid: the live process id of a managed server, else None.
        uptime_s: seconds since the live process was spawned, else None.
        last_probe: what the last probe found (``"up"``, ``"loading"``, ``"unreachable:
            connection refused"``), to show loading progress.
        restarts: restarts made since the restart budget was last refilled.
        supervision: what the supervisor is doing about it (``"restarting in 2.0 s"``,
            ``"gave up: restart budget spent (5 of 5)"``), else None.
    """

    state: InstanceState
    detail: str | None = None
    exit_code: int | None = None
    stop_reason: str | None = None
    pid: int | None = None
    uptime_s: float | None = None
    last_probe: str | None = None
    restarts: int = 0
    supervision: str | None = None


def map_report(
    report: ServerReport, *, model: str | Sequence[str] | None, alive: bool, adopted: bool
) -> InstanceStatus:
    """Map a probe report of a llama.cpp or mlx-lm server to a status.

    ``model`` is the name (or the names) the server should list our model under: the
    registry name, and when managed the weights path it was launched with; the spec's
    model when adopted. ``alive`` says whether our process still runs (always True for
    adopted servers, whose liveness only the probe can tell).
    """
    health = report.health
    if isinstance(health, Loading):
        return InstanceStatus(InstanceState.DEGRADED, "loading model")
    if isinstance(health, Unhealthy):
        return InstanceStatus(InstanceState.DEGRADED, health.why)
    if isinstance(health, Unreachable):
        return _unreachable(health.why, alive=alive, adopted=adopted)
    assert isinstance(health, Up)
    names = (model,) if isinstance(model, str) else tuple(model or ())
    if names and report.models and not any(lists(report.models, name) for name in names):
        detail = f"model {names[0]} is not listed by the server"
        return InstanceStatus(InstanceState.DEGRADED, detail)
    return InstanceStatus(InstanceState.RUNNING, "server up")


def map_ollama_report(report: ServerReport, *, tag: str, adopted: bool) -> InstanceStatus:
    """Map a probe of an Ollama daemon, for the model ``tag``, to a status.

    Source: seed-behaviour.md section 4 (``map_report``, Ollama) and checklist item 65; the
    managed load states are the Ollama actor's to add.
    """
    health = report.health
    if not isinstance(health, Up):
        return map_report(report, model=None, alive=False, adopted=adopted)
    if not report.lists(tag):
        return InstanceStatus(InstanceState.DEGRADED, f"model {tag} is not pulled")
    if report.resident(tag):
        return InstanceStatus(InstanceState.RUNNING, "model resident")
    if adopted:
        return InstanceStatus(InstanceState.RUNNING, "server up; model not resident")
    return InstanceStatus(InstanceState.LOADED, "model not resident")


def _unreachable(why: str, *, alive: bool, adopted: bool) -> InstanceStatus:
    if adopted:
        detail = f"unreachable ({why}); inferactors does not restart adopted servers"
        return InstanceStatus(InstanceState.EXITED, detail)
    if alive:
        return InstanceStatus(InstanceState.DEGRADED, f"starting: not listening yet ({why})")
    return InstanceStatus(InstanceState.EXITED, f"unreachable ({why})")
