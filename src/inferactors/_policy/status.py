"""The mapping from a probe report to a status (pure; no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

from .._flavor import InferFlavor
from .._status import InstanceState, InstanceStatus
from .matching import lists
from .probe_report import Busy, Loading, ServerReport, Unhealthy, Unreachable, Up


def map_report(
    report: ServerReport,
    *,
    model: str | Sequence[str] | None,
    alive: bool,
    adopted: bool,
    answered: bool = False,
    stopped: bool = False,
) -> InstanceStatus:
    """Map a probe report of a llama.cpp or mlx-lm server to a status.

    ``model`` is the name (or the names) the server should list our model under: the
    registry name, and when managed the weights path it was launched with; the spec's
    model when adopted. A server that is up but whose model list could not be read
    (``report.models_problem``) is Degraded with that reason: our model is not confirmed.
    ``alive`` says whether our process still runs (always True for
    adopted servers, whose liveness only the probe can tell). When the probe got no reply,
    ``answered`` tells a server that answered before and went silent from one that never
    answered (it is still starting); ``stopped`` says our live process is stopped by a
    signal (SIGSTOP, SIGTSTP), so it cannot answer. The words stay the same from one silent
    probe to the next, so a silent server is one state change, not one per probe.

    A busy server (`Busy`: every slot taken) serves: Running, detail ``"busy: <the server's
    words>"``, never "loading model". A llama-server in router mode whose entry for our
    model says its child failed, or that it is still loading, is Degraded with the router's
    words (`RouterModel.trouble`).
    """
    health = report.health
    if isinstance(health, Loading):
        return InstanceStatus(InstanceState.DEGRADED, "loading model")
    if isinstance(health, Unhealthy):
        return InstanceStatus(InstanceState.DEGRADED, health.why)
    if isinstance(health, Unreachable):
        silent = f"not answering: {health.why}"
        if alive and stopped and not adopted:
            detail = f"process is stopped (SIGSTOP/SIGTSTP): {silent}"
            return InstanceStatus(InstanceState.DEGRADED, detail)
        why = silent if answered else health.why
        return _unreachable(why, alive=alive, adopted=adopted, answered=answered)
    assert isinstance(health, Up | Busy)
    names = (model,) if isinstance(model, str) else tuple(model or ())
    if names and report.models_problem is not None and not report.models:
        return InstanceStatus(InstanceState.DEGRADED, report.models_problem)
    if names and report.models and not any(lists(report.models, name) for name in names):
        detail = f"model {names[0]} is not listed by the server"
        return InstanceStatus(InstanceState.DEGRADED, detail)
    trouble = _router_trouble(report, names)
    if trouble is not None:
        return InstanceStatus(InstanceState.DEGRADED, trouble)
    if isinstance(health, Busy):
        return InstanceStatus(InstanceState.RUNNING, f"busy: {health.why}")
    return InstanceStatus(InstanceState.RUNNING, "server up")


def _router_trouble(report: ServerReport, names: tuple[str, ...]) -> str | None:
    """What a router says is wrong with our model, or None (also with no model named)."""
    for entry in report.router:
        if any(lists((entry.id,), name) for name in names):
            trouble = entry.trouble()
            if trouble is not None:
                return trouble
    return None


def map_ollama_report(report: ServerReport, *, tag: str, adopted: bool) -> InstanceStatus:
    """Map a probe of an Ollama daemon, for the model ``tag``, to a status.

    The managed load states are the Ollama actor's to add.
    """
    health = report.health
    if not isinstance(health, Up):
        return map_report(report, model=None, alive=False, adopted=adopted)
    if report.models_problem is not None and not report.models:
        return InstanceStatus(InstanceState.DEGRADED, report.models_problem)
    if not lists(report.models, tag, InferFlavor.OLLAMA):
        return InstanceStatus(InstanceState.DEGRADED, f"model {tag} is not pulled")
    if lists(report.loaded, tag, InferFlavor.OLLAMA):
        return InstanceStatus(InstanceState.RUNNING, "model resident")
    if adopted:
        return InstanceStatus(InstanceState.RUNNING, "server up; model not resident")
    return InstanceStatus(InstanceState.LOADED, "model not resident")


def _unreachable(why: str, *, alive: bool, adopted: bool, answered: bool) -> InstanceStatus:
    """``why`` already says "not answering: ..." when the server had ``answered``."""
    said = f"unreachable: {why}" if answered else f"unreachable ({why})"
    if adopted:
        detail = f"{said}; inferactors does not restart adopted servers"
        return InstanceStatus(InstanceState.EXITED, detail)
    if alive and answered:
        return InstanceStatus(InstanceState.DEGRADED, why)
    if alive:
        return InstanceStatus(InstanceState.DEGRADED, f"starting: not listening yet ({why})")
    return InstanceStatus(InstanceState.EXITED, said)
