"""Which model a request names, as the front door routes it (pure; no I/O).

A request names a model by the instance's role, by one of its aliases (the registry model
name, the server's ``--alias``), or as Ollama names models: ``chat`` and ``chat:latest`` are
one model, and so are ``Mistral`` and ``mistral`` (`inferactors._config.ollama_names`).
The role wins over an alias, and an exact name over an Ollama reading of it, so a role is
never shadowed by another instance's alias.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._config.ollama_names import same_ollama_name
from .._errors import FrontDoorRefused, RefusalKind, shown
from .front_door_seam import ModelEntry

LISTED_NAMES = 20
"""How many model names an unknown-model message lists at most."""


def find_model(entries: Sequence[ModelEntry], name: str) -> ModelEntry | None:
    """The entry ``name`` routes to (module docstring), or None."""
    for entry in entries:
        if entry.name == name:
            return entry
    for entry in entries:
        if name in entry.aliases:
            return entry
    for entry in entries:
        if any(same_ollama_name(name, known) for known in (entry.name, *entry.aliases)):
            return entry
    return None


def model_list(entries: Iterable[ModelEntry]) -> str:
    """The names of ``entries`` for a message: ``"chat", "embed"`` (the first `LISTED_NAMES`,
    then how many more), or ``none`` when there are none."""
    names = [entry.name for entry in entries]
    if not names:
        return "none"
    shown_names = ", ".join(f'"{name}"' for name in names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return shown_names + (f" and {more} more" if more > 0 else "")


def unknown_model(entries: Iterable[ModelEntry], name: str) -> FrontDoorRefused:
    """The 404 refusal of a request for ``name``, naming the models that exist."""
    message = f"model {shown(name)} not found; the models here are: {model_list(entries)}"
    return FrontDoorRefused(message, kind=RefusalKind.UNKNOWN_MODEL, status=404, model=name)
