"""Ollama model names, read and compared as Ollama reads and compares them (pure; no I/O).

Ollama (``types/model/name.go``, ``ParseName``) reads ``[host/][namespace/]model[:tag]``,
cutting from the right: the tag after the last ``:`` when it follows the last ``/``, then
the model after the last ``/``, the namespace after the one before, and the rest is the
host (an ``http://`` or ``https://`` in front of it is dropped). Missing parts take the defaults
``registry.ollama.ai``, ``library`` and ``latest``, so ``qwen2.5``, ``qwen2.5:latest``,
``library/qwen2.5:latest`` and ``registry.ollama.ai/library/qwen2.5:latest`` are one model,
and ``user/model`` or ``hf.co/org/repo:Q4_K_M`` are others. Two names are the same model when
every part is equal ignoring ASCII case (``Name.EqualFold``: "Mistral" and "mistral" are one
model to Ollama; a registry host is a DNS name, case-blind anyway).

Each part is Ollama's grammar: a letter, digit or ``_`` first, then letters, digits and
``_ -``, plus ``.`` outside the namespace and ``:`` (a port) in the host; at most 350
characters for the host and 80 for the others. Stricter than Ollama in one way: ``..`` is
refused anywhere, so a name never reads as a path step.

This lives in ``_config`` because the spec checks an Ollama instance's ``model`` with it, and
``_config`` imports nothing above it; ``_policy`` uses it for residency and matching.
"""

from __future__ import annotations

import re

import attrs

from .._errors import InvalidConfig, shown

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"

MAX_NAME_CHARS = 600
"""Longest name read at all: the parts' limits (350 + 3 x 80) and their separators."""

_PART_LIMITS = {"host": 350, "namespace": 80, "model": 80, "tag": 80}
_PATTERNS = {
    "host": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*"),
    "namespace": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*"),
    "model": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"),
    "tag": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"),
}


@attrs.frozen
class OllamaName:
    """A model name with every part filled in (the defaults where the text had none)."""

    host: str
    namespace: str
    model: str
    tag: str

    def key(self) -> tuple[str, str, str, str]:
        """The parts in ASCII lower case: equal keys are the same model to Ollama."""
        return (
            _lower(self.host),
            _lower(self.namespace),
            _lower(self.model),
            _lower(self.tag),
        )

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"


def parse_ollama_name(text: str, field: str = "model") -> OllamaName:
    """``text`` read as Ollama reads a model name, defaults filled in.

    Raises:
        InvalidConfig: naming ``field``: empty, whitespace, over-long, ``..``, an empty or
            malformed part (the message names the part), or more than three ``/`` parts.
    """
    problem = ollama_name_problem(text)
    if problem is not None:
        raise InvalidConfig(f"{field} {shown(text)} is not an Ollama model name: {problem}")
    return _parse(text)


def ollama_name_problem(text: str) -> str | None:
    """Why ``text`` is not an Ollama model name, or None when it is one."""
    if not text:
        return "it is empty"
    if len(text) > MAX_NAME_CHARS:
        return f"it is longer than {MAX_NAME_CHARS} characters"
    if any(char.isspace() for char in text):
        return "it contains whitespace"
    if ".." in text:
        return 'it contains ".."'
    parts = _bare_parts(text)
    if parts is None:
        return "it has more than host/namespace/model parts"
    for kind, part in parts.items():
        if not part:
            return f"its {kind} is empty"
        if len(part) > _PART_LIMITS[kind]:
            return f"its {kind} is longer than {_PART_LIMITS[kind]} characters"
        if _PATTERNS[kind].fullmatch(part) is None:
            return f"its {kind} {shown(part)} has a character Ollama does not allow"
    return None


def same_ollama_name(a: str, b: str) -> bool:
    """Whether Ollama reads ``a`` and ``b`` as the same model (module docstring); names it
    cannot read compare by plain equality."""
    if a == b:
        return True
    if ollama_name_problem(a) is not None or ollama_name_problem(b) is not None:
        return False
    return _parse(a).key() == _parse(b).key()


def _parse(text: str) -> OllamaName:
    parts = _bare_parts(text) or {}
    return OllamaName(
        host=parts.get("host") or DEFAULT_HOST,
        namespace=parts.get("namespace") or DEFAULT_NAMESPACE,
        model=parts.get("model", ""),
        tag=parts.get("tag") or DEFAULT_TAG,
    )


def _bare_parts(text: str) -> dict[str, str] | None:
    """The parts written in ``text`` (an empty string for a part written empty), cut as
    Ollama's ``ParseNameBare`` cuts them; None for more than three ``/`` parts."""
    parts: dict[str, str] = {}
    rest = text
    if rest.rfind(":") > rest.rfind("/"):
        rest, parts["tag"] = rest.rsplit(":", 1)
    scheme, sep, after = rest.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        return None
    segments = after.split("/") if sep else rest.split("/")
    if len(segments) > 3 or (sep and len(segments) != 3):
        return None  # a scheme goes only in front of a host
    kinds = ("host", "namespace", "model")[-len(segments) :]
    parts.update(zip(kinds, segments, strict=True))
    return parts


def _lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
