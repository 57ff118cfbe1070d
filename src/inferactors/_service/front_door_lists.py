"""The front door's model lists, told from `Scheduler.models` alone (no I/O, no start).

Each list shows every model the front door serves with where it stands now (`Residency`):
``resident`` (running, its deep health passed), ``starting``, ``stopping`` or
``not-loaded``, so a client never mistakes a model that is loading or being stopped for one
that is ready (llama-swap shows both as ``loaded``).

- ``GET /v1/models``: OpenAI's list; each entry ``{"id", "object": "model", "created": 0,
  "owned_by": "inferactors", "status": {"value": <residency>}, "aliases", "flavor",
  "on_demand"}`` (``status.value`` is where llama.cpp's router mode puts its own states);
  ``GET /v1/models/{id}``: one such entry.
- ``GET /api/tags``: Ollama's list of the models there are, each ``{"name", "model",
  "details": {"format", "family": ""}, "residency"}``; fields the front door does not know
  without asking the server (``size``, ``digest``, ``modified_at``) are left out rather than
  made up.
- ``GET /api/ps``: Ollama's list of the models in memory: the resident and the stopping
  ones (a stopping instance still holds its memory), each as in ``/api/tags``.
- ``POST /api/show`` for a model that llama-server or mlx_lm.server serves: ``{"details",
  "model_info": {}, "residency"}`` (an Ollama instance answers it itself).
- ``GET /api/version``: ``{"version": <inferactors' version>}``.
- ``GET /``: Ollama's liveness text, `OLLAMA_RUNNING`.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Any

from .._actors.front_door_seam import ModelEntry, Residency
from .._flavor import InferFlavor

_FORMATS = {
    InferFlavor.LLAMACPP: "gguf",
    InferFlavor.MLX_LM: "safetensors",
    InferFlavor.OLLAMA: "gguf",
}
IN_MEMORY = (Residency.RESIDENT, Residency.STOPPING)
OLLAMA_RUNNING = "Ollama is running"
"""What Ollama answers on ``GET /`` and ``HEAD /`` (its liveness check), ``text/plain``."""


def openai_models(entries: Iterable[ModelEntry]) -> dict[str, Any]:
    """``GET /v1/models`` (module docstring)."""
    return {"object": "list", "data": [openai_model(entry) for entry in entries]}


def openai_model(entry: ModelEntry) -> dict[str, Any]:
    """One model as ``GET /v1/models`` lists it, and ``GET /v1/models/{id}`` answers."""
    return {
        "id": entry.name,
        "object": "model",
        "created": 0,
        "owned_by": "inferactors",
        "status": {"value": entry.residency.value},
        "aliases": list(entry.aliases),
        "flavor": entry.flavor.id,
        "on_demand": entry.on_demand,
    }


def ollama_tags(entries: Iterable[ModelEntry]) -> dict[str, Any]:
    """``GET /api/tags`` (module docstring)."""
    return {"models": [_ollama_model(entry) for entry in entries]}


def ollama_ps(entries: Iterable[ModelEntry]) -> dict[str, Any]:
    """``GET /api/ps`` (module docstring)."""
    return {"models": [_ollama_model(e) for e in entries if e.residency in IN_MEMORY]}


def ollama_show(entry: ModelEntry) -> dict[str, Any]:
    """``POST /api/show`` for a model that llama-server or mlx_lm.server serves."""
    return {
        "details": _details(entry),
        "model_info": {},
        "residency": entry.residency.value,
    }


def version() -> dict[str, str]:
    """``GET /api/version``: inferactors' own version (it is not Ollama's)."""
    try:
        number = metadata.version("inferactors")
    except metadata.PackageNotFoundError:
        number = "0.0.0"
    return {"version": number}


def _ollama_model(entry: ModelEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "model": entry.name,
        "details": _details(entry),
        "residency": entry.residency.value,
    }


def _details(entry: ModelEntry) -> dict[str, Any]:
    return {"format": _FORMATS[entry.flavor], "family": "", "parent_model": ""}
