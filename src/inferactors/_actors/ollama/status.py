"""How an Ollama actor's `OllamaState` reads as an `InstanceStatus` (pure; no trio, no I/O).

`ollama_status` says where a load is (loading, resident, failed), and also a daemon that
does not answer, a tag that is not pulled, a lingering unload, a lost ownership or a model
unloaded by someone else, and who loaded the model.
"""

from __future__ import annotations

import attrs

from ..._errors import InferactorsError
from ..._policy.ollama_parse import OllamaLoadTimeout, same_tag
from ..._policy.probe_report import ServerReport, Up
from ..._policy.status import map_report
from ..._status import InstanceState, InstanceStatus
from .messages import Survey
from .state import OllamaState, Owner, Phase


def ollama_status(state: OllamaState) -> InstanceStatus:
    """The status of a managed Ollama instance: Loaded, then Degraded "loading model", then
    Running "model resident"; a failed load is Degraded "load failed: ..."; an unpulled tag,
    a daemon that does not answer, a lingering unload and a lost ownership are reported as
    such."""
    status = _status_without_notes(state)
    return attrs.evolve(status, restarts=state.restarts, supervision=state.supervision)


def _status_without_notes(state: OllamaState) -> InstanceStatus:
    tag, survey = state.tag, state.survey
    if state.phase in (Phase.CHECKING, Phase.LOADING):
        return InstanceStatus(InstanceState.DEGRADED, "loading model")
    if survey is not None and not isinstance(survey.health, Up):
        return map_report(ServerReport(survey.health), model=None, alive=False, adopted=False)
    if survey is not None and survey.pulled is not None and not _pulled(survey, tag):
        return InstanceStatus(InstanceState.DEGRADED, f"model {tag} is not pulled")
    if state.phase is Phase.FAILED:
        return InstanceStatus(InstanceState.DEGRADED, f"load failed: {state.failure}")
    if state.lingering is not None:
        return InstanceStatus(InstanceState.DEGRADED, state.lingering)
    if state.phase is Phase.READY:
        return _ready_status(state)
    return _idle_status(state)


def _ready_status(state: OllamaState) -> InstanceStatus:
    if state.lost is not None:
        return InstanceStatus(InstanceState.DEGRADED, state.lost)
    if state.evicted is not None:
        return InstanceStatus(InstanceState.DEGRADED, state.evicted)
    if state.resident is False:
        who = "us" if state.owner is Owner.OURS else "someone else"
        detail = (
            f"model {state.tag} is no longer resident (it was loaded by {who}); "
            "inferactors does not reload it"
        )
        return InstanceStatus(InstanceState.DEGRADED, detail)
    if state.owner is Owner.THEIRS:
        detail = "model resident (loaded by someone else; inferactors never unloads it)"
        return InstanceStatus(InstanceState.RUNNING, detail)
    return InstanceStatus(InstanceState.RUNNING, "model resident")


def _idle_status(state: OllamaState) -> InstanceStatus:
    if state.phase is Phase.STOPPING:
        return InstanceStatus(InstanceState.DEGRADED, f"unloading model {state.tag}")
    if state.stop_note is not None:
        return InstanceStatus(InstanceState.LOADED, state.stop_note)
    if state.resident is None:
        return InstanceStatus(InstanceState.LOADED)
    if state.resident:
        return InstanceStatus(InstanceState.LOADED, "model resident (loaded by someone else)")
    return InstanceStatus(InstanceState.LOADED, "model not resident")


def _pulled(survey: Survey, tag: str) -> bool:
    return any(same_tag(tag, name) for name in survey.pulled or ())


def load_failure(error: InferactorsError) -> str:
    """The words after "load failed: " for a load error: a runner or request timeout reads
    "load timeout: ...", anything else its message."""
    if isinstance(error, OllamaLoadTimeout):
        return f"load timeout: {error}"
    return str(error) or type(error).__name__
