"""Model-name matching: does a server's model list name the model we want? (pure; no I/O).

Servers list models under names that differ from ours: llama-server under the file name
(``Llama-3.2-1B-Instruct-Q4_K_M.gguf``) or its ``--alias``, mlx_lm.server under a Hub repo id
or a resolved path (``mlx-community/Qwen3-Coder-Next-4bit``), Ollama as ``name:tag`` with the
tag defaulting to ``latest``. Source: seed-behaviour.md section 3 ("Model matching") and
checklist item 27; Ollama's tag default from server-apis.md section 3 ("Names").
"""

from __future__ import annotations

from collections.abc import Iterable

from .._flavor import InferFlavor

_LATEST = ":latest"
_GGUF = ".gguf"


def same_model(wanted: str, listed: str) -> bool:
    """Whether the server's model id ``listed`` names the model ``wanted``.

    True when any of these holds (seed-behaviour.md section 3):

    1. the names are equal;
    2. they are equal once a trailing ``:latest`` is stripped from either side
       (``m`` and ``m:latest``);
    3. the last ``/`` segment of ``listed``, minus a trailing ``.gguf`` (any case), contains
       ``wanted`` case-insensitively (``Llama-3.2-1B-Instruct-Q4_K_M.gguf`` lists
       ``Llama-3.2-1B-Instruct``; ``mlx-community/Qwen3-Coder-Next-4bit`` lists
       ``Qwen3-Coder-Next-4bit``).

    Rule 3 is deliberately loose, as in the reference: a short ``wanted`` matches any id that
    contains it. One narrowing: an empty ``wanted`` never matches by rule 3, since it would
    otherwise match every id.

    Args:
        wanted: the model name we ask for (registry name, spec model or Ollama tag).
        listed: one id as the server lists it (``/v1/models`` ``data[].id`` or Ollama's
            ``models[].name``).
    """
    if wanted == listed or _without_latest(wanted) == _without_latest(listed):
        return True
    return bool(wanted) and wanted.casefold() in _basename(listed).casefold()


def lists(models: Iterable[str], wanted: str) -> bool:
    """Whether any id in ``models`` names ``wanted`` under `same_model`."""
    return any(same_model(wanted, listed) for listed in models)


def _without_latest(name: str) -> str:
    return name.removesuffix(_LATEST)


def _basename(listed: str) -> str:
    last = listed.rsplit("/", 1)[-1]
    if last[-len(_GGUF) :].lower() == _GGUF:
        return last[: -len(_GGUF)]
    return last


def completion_model(
    flavor: InferFlavor, listed: tuple[str, ...], served: str | None
) -> str | None:
    """The ``model`` field of a deep-health completion, or None to leave it out.

    mlx_lm.server loads whatever a request names (mlx-lm #1892, FC-09), so it gets none;
    llama-server ignores the field in single-model mode and routes by it in router mode, so
    it gets the listed id that matches our model, else our model's name, else the first id.
    """
    if flavor is InferFlavor.MLX_LM:
        return None
    if served is not None:
        matching = [name for name in listed if same_model(served, name)]
        return matching[0] if matching else served
    return listed[0] if listed else None
