"""Model manifests: what a registry entry pins (pure data; no I/O).

A manifest names a model, its format, the directory its files live in, and for each file its
path relative to that directory, its size in bytes and its BLAKE3 digest (64 lower-case hex
characters). There is no signature envelope: inferactors pins digests, and the operator's
registry file is the trust anchor.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from .._flavor import ModelFormat


@attrs.frozen
class ModelFile:
    """One pinned file: ``path`` relative to the model root, ``size`` in bytes, BLAKE3 hex."""

    path: str
    size: int
    blake3: str


@attrs.frozen
class ModelSource:
    """Where the weights came from; informational except ``ollama_tag`` (Ollama's name)."""

    hf_repo: str | None = None
    hf_revision: str | None = None
    ollama_tag: str | None = None


@attrs.frozen
class ModelManifest:
    """A registry entry: ``shards`` are weight files, ``tokenizer`` the other pinned files."""

    name: str
    format: ModelFormat
    root: str
    shards: tuple[ModelFile, ...]
    tokenizer: tuple[ModelFile, ...] = ()
    source: ModelSource = ModelSource()


@attrs.frozen
class ResolvedModel:
    """A verified model, ready to launch: every path is absolute and was checked against
    its pinned size and digest by `ModelRegistry.resolve`."""

    name: str
    format: ModelFormat
    root: Path
    shards: tuple[Path, ...]
    tokenizer: tuple[Path, ...] = ()
    source: ModelSource = ModelSource()

    @property
    def ollama_tag(self) -> str:
        """The tag Ollama knows this model by: the manifest's ``ollama_tag`` or the name."""
        return self.source.ollama_tag or self.name
