"""Model identity: does a server's model list name the model we want? (pure; no I/O).

Servers list models under names that differ from ours: llama-server under its ``-m`` path
or its ``--alias`` verbatim (``/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf``; a managed one is
started ``-m /proc/self/fd/N --alias <planned path>`` and lists the planned path),
mlx_lm.server under a Hub repo id or a resolved path (``mlx-community/Qwen3-Coder-Next-4bit``),
Ollama under its own names (``qwen2.5:0.5b``, ``hf.co/org/repo:Q4_K_M``).

Identity is exact, never a substring (the original matched loosely): ``llama`` is not
``codellama-34b``, and ``qwen`` is not resident when only ``qwen2.5:0.5b`` is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._config.ollama_names import same_ollama_name
from .._flavor import InferFlavor

_GGUF = ".gguf"


def same_model(wanted: str, listed: str, flavor: InferFlavor = InferFlavor.LLAMACPP) -> bool:
    """Whether the server's model id ``listed`` names the model ``wanted``.

    llama.cpp and mlx-lm: the two are equal; or ``wanted`` has no ``/`` and equals the last
    ``/`` segment of ``listed`` (``Qwen3-Coder-Next-4bit`` for
    ``mlx-community/Qwen3-Coder-Next-4bit``), with or without a ``.gguf`` suffix on either
    (``Llama-3.2-1B-Instruct-Q4_K_M`` for ``/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf``).
    Case counts, as llama-server lists the path it was given verbatim and paths are
    case-sensitive; only the ``.gguf`` suffix is recognised in any case. A path ``wanted``
    matches only the same path.

    Ollama: the names are one model once read as Ollama reads them (default registry host,
    ``library/`` namespace and ``:latest`` tag; case-blind;
    `inferactors._config.ollama_names.same_ollama_name`).

    Args:
        wanted: the model name we ask for (registry name, weights path, spec model or tag).
        listed: one id as the server lists it (``/v1/models`` ``data[].id``, Ollama's
            ``models[].name``).
        flavor: whose names these are (llama.cpp's rule serves mlx-lm too).
    """
    if wanted == listed:
        return True
    if flavor is InferFlavor.OLLAMA:
        return same_ollama_name(wanted, listed)
    if not wanted or "/" in wanted:
        return False
    last = listed.rsplit("/", 1)[-1]
    return bool(_stem(wanted)) and _stem(wanted) == _stem(last)


def lists(models: Iterable[str], wanted: str, flavor: InferFlavor = InferFlavor.LLAMACPP) -> bool:
    """Whether any id in ``models`` names ``wanted`` under `same_model`."""
    return any(same_model(wanted, listed, flavor) for listed in models)


def _stem(name: str) -> str:
    if name[-len(_GGUF) :].lower() == _GGUF:
        return name[: -len(_GGUF)]
    return name


def completion_model(
    flavor: InferFlavor, listed: tuple[str, ...], served: str | None
) -> str | None:
    """The ``model`` field of a deep-health completion, or None to leave it out.

    mlx_lm.server loads whatever a request names (mlx-lm #1892), so it gets none;
    llama-server ignores the field in single-model mode and routes by it in router mode, so
    it gets the listed id that is our model (`same_model`), else our model's name, else the
    first id.
    """
    if flavor is InferFlavor.MLX_LM:
        return None
    if served is not None:
        matching = [name for name in listed if same_model(served, name, flavor)]
        return matching[0] if matching else served
    return listed[0] if listed else None
