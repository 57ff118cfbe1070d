"""Model manifests: what a registry entry pins (pure data; no I/O).

A manifest names a model, its format, the directory its files live in, and for each file its
path relative to that directory, its size in bytes and its BLAKE3 digest (64 lower-case hex
characters). A model may carry a detached OpenSSF Model Signing signature
(`ModelSignature`, ``design/signing.md``), checked against the trust anchors of the run file
or the library's config; without one, the operator's registry file is the trust anchor.
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


SIGNED_ALGORITHMS = ("blake2", "blake3", "sha256")
"""The digests an OpenSSF Model Signing signature may sign files with (its ``hash_type``)."""


@attrs.frozen
class ModelSignature:
    """A detached OpenSSF Model Signing signature (a sigstore bundle, ``model.sig``) that
    was verified when the model was registered.

    Attributes:
        file: the signature file itself, pinned like the model's files (relative to the
            model root), so a changed signature is a changed pinned file.
        algorithm: the digest its manifest signs each file with: ``blake3`` (compared with
            the pins directly), ``sha256`` or ``blake2`` (computed beside BLAKE3 whenever a
            file is hashed in full).
        anchor: the name of the trust anchor that verified it at registration.
        signer: who signed it, as that verification found: ``key sha256:<64 hex>`` (the
            SHA-256 of the public key's PEM, the bundle's key hint) or ``certificate
            <subject>`` (the signing certificate's subject, RFC 4514).
    """

    file: ModelFile
    algorithm: str
    anchor: str
    signer: str


@attrs.frozen
class ModelManifest:
    """A registry entry: ``shards`` are weight files, ``tokenizer`` the other pinned files,
    ``signature`` the detached signature registered with it, if any."""

    name: str
    format: ModelFormat
    root: str
    shards: tuple[ModelFile, ...]
    tokenizer: tuple[ModelFile, ...] = ()
    source: ModelSource = ModelSource()
    signature: ModelSignature | None = None


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
    signed_by: str | None = None
    """Who signed it, as its last verification found (``"ops: key sha256:74e77a50..."``),
    or None for a model registered without a signature."""

    @property
    def ollama_tag(self) -> str:
        """The tag Ollama knows this model by: the manifest's ``ollama_tag`` or the name."""
        return self.source.ollama_tag or self.name


def resolved_model(manifest: ModelManifest) -> ResolvedModel:
    """``manifest`` as a `ResolvedModel`: absolute paths under its root, symlinks resolved
    (an ollama model: ``Path()`` and no files). Reads the file system (``Path.resolve``)."""
    ollama = manifest.format is ModelFormat.OLLAMA
    root = Path() if ollama else Path(manifest.root).resolve()
    return ResolvedModel(
        name=manifest.name,
        format=manifest.format,
        root=root,
        shards=tuple(root / f.path for f in manifest.shards),
        tokenizer=tuple(root / f.path for f in manifest.tokenizer),
        source=manifest.source,
    )
