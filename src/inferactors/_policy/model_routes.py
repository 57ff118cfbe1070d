"""Which model a request names, as the front door routes it (pure; no I/O).

A request names a model by the instance's role, by one of its aliases (the registry model
name, the server's ``--alias``), or as Ollama names models: ``chat`` and ``chat:latest`` are
one model, and so are ``Mistral`` and ``mistral`` (`inferactors._config.ollama_names`).
The role wins over an alias, and an exact name over an Ollama reading of it, so a role is
never shadowed by another instance's alias. The front door's HTTP side and its scheduler
both route with `route`, so the two never disagree about a name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._config.ollama_names import same_ollama_name
from .._errors import shown

LISTED_NAMES = 20
"""How many model names an unknown-model message lists at most."""


def route(name: str, models: Sequence[tuple[str, tuple[str, ...]]]) -> int | None:
    """The index in ``models`` (each a role and its aliases) that ``name`` routes to, or
    None (module docstring: role, then alias, then Ollama's reading)."""
    for index, (role, _) in enumerate(models):
        if role == name:
            return index
    for index, (_, aliases) in enumerate(models):
        if name in aliases:
            return index
    for index, (role, aliases) in enumerate(models):
        if any(same_ollama_name(name, known) for known in (role, *aliases)):
            return index
    return None


def model_list(names: Iterable[str]) -> str:
    """``names`` for a message: ``"chat", "embed"`` (the first `LISTED_NAMES`, then how
    many more), or ``none`` when there are none."""
    listed = list(names)
    if not listed:
        return "none"
    words = ", ".join(f'"{name}"' for name in listed[:LISTED_NAMES])
    more = len(listed) - LISTED_NAMES
    return words + (f" and {more} more" if more > 0 else "")


def unknown_words(name: str, names: Iterable[str]) -> str:
    """Why a request for ``name`` found no model, naming the models that exist (``name`` is
    the client's and may be megabytes: it is cut, `shown`)."""
    return f"model {shown(name)} not found; the models here are: {model_list(names)}"
