"""Deep health of an adopted Ollama: never change the daemon's state.

A completion names its model, and Ollama loads a model that is not resident (with its own
default keep_alive) or, for a cloud model (``/api/tags`` ``remote_host``), forwards the
request to the remote host. An adopted daemon is not ours to change and a cloud host not
ours to call, so before an adopted Ollama's deep health (a caller's or the watchdog's)
`guard_adopted_ollama` reads ``/api/tags`` and ``/api/ps`` and refuses both cases. A managed
Ollama model is the Ollama actor's (``ollama_work``): unchanged.
"""

from __future__ import annotations

from ..._edges.probe import ProbeFailure
from ..._errors import BackendError
from ..._flavor import InferFlavor
from ..._policy.admission import Plan
from .work import OllamaOpener, _opened, cloud_host, open_ollama_client


async def guard_adopted_ollama(
    plan: Plan, timeout_s: float, open_api: OllamaOpener = open_ollama_client
) -> None:
    """Nothing unless ``plan`` adopts an Ollama model; else two GETs, each within
    ``timeout_s`` float seconds (the caller's deadline bounds both).

    Raises:
        BackendError: the model is a cloud model (``"... is a cloud model: deep health would
            send a request to HOST; not sent"``), it is not resident (``"... is not resident
            on the adopted Ollama: a deep health would load it; not sent"``), or the lists
            could not be read (nothing is sent either).
    """
    tag = plan.served_model
    if plan.launch is not None or plan.spec.runtime is not InferFlavor.OLLAMA or tag is None:
        return
    async with _opened(open_api(plan.spec.base_url(), timeout_s, timeout_s)) as api:
        try:
            host = cloud_host(await api.tags(), tag)
            if host is not None:
                raise BackendError(
                    f"deep health: {tag} is a cloud model: deep health would send a request "
                    f"to {host}; not sent"
                )
            if await api.resident(tag) is None:
                raise BackendError(
                    f"deep health: {tag} is not resident on the adopted Ollama: a deep health "
                    "would load it; not sent"
                )
        except ProbeFailure as failure:
            raise BackendError(f"deep health: {failure.why}; not sent") from None
