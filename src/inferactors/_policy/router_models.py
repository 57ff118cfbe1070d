"""llama-server's router mode: the per-model status of its model list (pure; no I/O).

A llama-server started without ``-m`` (``--models-dir``, ``--models-preset`` or its cache)
is a router: each model runs in a child server it spawns on demand, and ``GET /models`` and
``GET /v1/models`` list every model it knows with a ``status`` object (llama.cpp
``tools/server/server-models.cpp``, ``get_router_models``)::

    {"id": "m", "status": {"value": "loaded", "args": [...]}}
    {"id": "m", "status": {"value": "unloaded", "args": [...], "failed": true, "exit_code": 1}}

``value`` is one of ``unloaded``, ``loading``, ``loaded`` (``sleeping`` and ``downloading``
in later builds); a child that exited with a non-zero code leaves ``value`` ``unloaded``
with ``failed`` true and its ``exit_code``. A single-model server's list has no ``status``
object, so it has no router entries and nothing here applies to it.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class RouterModel:
    """One model of a router's list: its ``id``, ``status.value``, and whether its child
    ``failed`` (with ``exit_code`` when the router gave one)."""

    id: str
    value: str
    failed: bool = False
    exit_code: int | None = None

    def trouble(self) -> str | None:
        """Why this model is not serving, in words, or None when it is loaded (or will be
        loaded on its first request: ``unloaded``, ``sleeping``)."""
        if self.failed or self.value in ("failed", "error"):
            code = f" (its child exited with code {self.exit_code})" if self.exit_code else ""
            return f"router: model {self.id} failed to load{code}"
        if self.value in ("loading", "downloading"):
            return f"router: model {self.id} is {self.value}"
        return None


def router_models_of(document: object) -> tuple[RouterModel, ...]:
    """The router entries of a parsed model list: one per ``data[]`` entry with a string
    ``id`` and a ``status`` object whose ``value`` is a string. Lenient, like the model-id
    reader: anything else (no list, entries without a status) gives nothing."""
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return ()
    found = (_entry(item) for item in entries if isinstance(item, dict))
    return tuple(entry for entry in found if entry is not None)


def _entry(item: dict[str, object]) -> RouterModel | None:
    model, status = item.get("id"), item.get("status")
    if not isinstance(model, str) or not isinstance(status, dict):
        return None
    value = status.get("value")
    if not isinstance(value, str):
        return None
    code = status.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    return RouterModel(model, value, status.get("failed") is True, exit_code)
