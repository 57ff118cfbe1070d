"""The model registry: named, digest-pinned models kept in one JSON file.

A `ModelRegistry` records `ModelManifest`s (see `manifest.py`) in a JSON file (format in
`manifest_io.py`) and hands out `ResolvedModel`s only for models whose files still match
their pinned sizes and BLAKE3 digests. Files are hashed in place and never copied.

Checks:

- Checks are *lazy*: a file is re-hashed unless its ``(size, mtime_ns, ctime_ns, inode,
  device)`` equals the one it had when it last passed a full hash, in this registry object
  or, for a registry file, in any earlier one: the record beside the registry file
  (``verified_record.py``) vouches for it only if its digest there is the manifest's pin.
  Size and mtime alone, forgotten with the process, would not do: ctime and inode also
  catch a file swapped for one with a forged mtime. So the first resolve of
  an in-memory registry, or of files never recorded, re-hashes every file.
- A resized file, a digest mismatch or a path that resolves outside the root refuses the
  model (`PinMismatch`), and the refusal is sticky: every later resolve is a full check until
  one passes.
- A missing file or root makes the model not ready without that stickiness (a disk that is
  not mounted yet is not tampering).
- Every check opens the files beneath the root without following links out of it and checks
  the open descriptors (``pinning.py``); `ModelRegistry.pin` returns those descriptors open,
  so a spawn hands the server the very bytes that were verified (``design/pinning.md``).
- A detached OpenSSF Model Signing signature is verified against the trust anchors whenever
  a file is hashed in full; one that no longer verifies is refused like a changed byte, and
  so is a model not signed as a load required (``design/signing.md``).

All I/O here is synchronous; async callers run it in a thread (``trio.to_thread.run_sync``).
A registry object may be shared by threads: checks of one model are serialised. The entries
(which manifest each name stands for) and how the file is kept are in `registry_entries.py`:
updates hold an exclusive ``flock`` on ``<registry>.lock`` so that two processes adding models
do not lose each other's entries, the file is re-read when it changed on disk, and every
save is atomic: a crash leaves the old file.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import attrs

from .._errors import BackendError, ModelNotReady, PinMismatch
from .._flavor import ModelFormat
from .anchors import LiveAnchors, TrustAnchors
from .hashing import Blake3Hasher, CheckFailure, FileHasher, ProgressFn
from .manifest import ModelManifest, ModelSource, ResolvedModel, resolved_model
from .manifest_io import check_manifest, check_model_name
from .model_checks import ModelChecks
from .pinning import PinnedModel
from .registry_entries import RegistryEntries
from .scan import scan_model
from .signed_add import scan_signed
from .signing_rules import SigningRules
from .verified_record import RACY_MARGIN_S, VerifiedRecord

__all__ = ["ModelCheck", "ModelRegistry"]


class ModelCheck(NamedTuple):
    """The outcome of a full check of one model by `ModelRegistry.verify`."""

    name: str
    ok: bool
    reason: str


@attrs.define(eq=False)
class ModelRegistry:
    """Named models pinned by size and BLAKE3 digest, optionally backed by a JSON file.

    Build one with `ModelRegistry.open` or `ModelRegistry.in_memory`, not the constructor.
    """

    _entries: RegistryEntries
    _checks: ModelChecks

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        hasher: FileHasher | None = None,
        racy_margin_s: float = RACY_MARGIN_S,
        anchors: TrustAnchors | None = None,
    ) -> ModelRegistry:
        """Open the registry file at ``path``; a missing file is an empty registry.

        Files verified by a full hash are recorded in ``<path>.verified``, so a later
        registry object on the same file need not hash them again (module docstring); a
        file changed less than ``racy_margin_s`` seconds before its check is not recorded.
        Signatures are verified against ``anchors`` (none: a signed model fails its check).

        Raises:
            InvalidConfig: the file is malformed; the message names the file and the field,
                for example ``models.json: $.models[2].shards[0].blake3: expected ...``.
            BackendError: the file exists but cannot be read.
        """
        record = VerifiedRecord.beside(path, racy_margin_s=racy_margin_s)
        rules = SigningRules(LiveAnchors(anchors or TrustAnchors()))
        checks = ModelChecks(hasher or Blake3Hasher(), rules, record)
        registry = cls(entries=RegistryEntries(path), checks=checks)
        registry._entries.refresh()
        return registry

    @classmethod
    def in_memory(
        cls, *, hasher: FileHasher | None = None, anchors: TrustAnchors | None = None
    ) -> ModelRegistry:
        """An empty registry that lives only in this object (tests, embedding)."""
        rules = SigningRules(LiveAnchors(anchors or TrustAnchors()))
        checks = ModelChecks(hasher or Blake3Hasher(), rules)
        return cls(entries=RegistryEntries(None), checks=checks)

    @property
    def path(self) -> Path | None:
        """The registry file, or None for an in-memory registry."""
        return self._entries.path

    @property
    def anchors(self) -> TrustAnchors:
        """The trust anchors signatures are verified against now."""
        return self._checks.rules.anchors

    def use_anchors(self, anchors: TrustAnchors) -> bool:
        """Verify signatures against ``anchors`` from now on (the anchor files as a reload
        re-read them); whether they differ from those in force. Every model's signature is
        verified again at its next check, and a server's held pin at its next
        `PinnedModel.changed` (so a key taken out of the anchors holds its servers down
        as tampered); a recorded requirement keeps only the anchors still configured."""
        return self._checks.use_anchors(anchors)

    def signer_seen(self, name: str) -> str | None:
        """Who signed model ``name`` as the last check of that name in this object found
        it (a load's, a spawn's pin, a running server's re-check): ``"ops: key
        sha256:74e77a506e308a1f..."``; None before any check, for an unsigned model, or
        when that check refused it. In memory only: no I/O."""
        return self._checks.signer_seen(name)

    def add(
        self,
        path: Path,
        *,
        name: str,
        source: ModelSource | None = None,
        format: ModelFormat | None = None,  # shadows the builtin: the manifest's field name
        on_progress: ProgressFn | None = None,
        signature: Path | None = None,
    ) -> ModelManifest:
        """Register the model at ``path`` under ``name``, hashing its files in place.

        ``path`` is one ``.gguf`` file or a model directory: top-level ``*.safetensors,
        *.gguf, *.bin, *.pt, *.pth, *.npz, *.ckpt`` are shards, ``*.json, *.model,
        *.tiktoken, *.txt, *.jinja`` tokenizer files; ``format`` overrides the detected format
        (see `scan.scan_model`). Nothing is copied; the file is saved atomically.
        With ``signature`` (a detached OMS signature beneath the model's root), it is
        verified against the trust anchors and must sign exactly the files pinned
        (`signed_add.scan_signed`); the manifest records it and who signed it.

        Returns:
            The manifest as stored.

        Raises:
            InvalidConfig: ``name`` is not a plain token or is already registered, ``path`` is
                missing or holds no weights, ``format`` does not fit the files, the signature
                does not verify or sign exactly those files (``signature: model.sig: ...``),
                or the registry file is malformed (it is left untouched).
            Unsupported: ``signature`` is given and the ``signing`` extra is not installed.
            BackendError: a model file cannot be read or the registry cannot be saved.
        """
        check_model_name(name)
        self._entries.refuse_taken(name)
        try:
            if signature is None:
                scanned = scan_model(
                    path, name=name, fmt=format, hasher=self._checks.hasher, on_progress=on_progress
                )
            else:
                scanned = scan_signed(
                    path,
                    name=name,
                    fmt=format,
                    hasher=self._checks.hasher,
                    signature=signature,
                    anchors=self.anchors,
                    on_progress=on_progress,
                )
        except OSError as error:
            raise BackendError(f"path: cannot read {error.filename}: {error.strerror}") from error
        manifest = check_manifest(attrs.evolve(scanned, source=source or ModelSource()))
        self._entries.insert(manifest)
        return manifest

    def add_manifest(self, manifest: ModelManifest) -> ModelManifest:
        """Register a manifest made elsewhere (an import that hashed the files itself),
        checked by the rules of the registry file.

        Raises:
            InvalidConfig: a bad manifest or a name already registered.
            BackendError: the registry cannot be saved.
        """
        manifest = check_manifest(manifest)
        self._entries.insert(manifest)
        return manifest

    def replace_manifest(self, manifest: ModelManifest, *, replacing: ModelManifest) -> None:
        """Register ``manifest`` in place of ``replacing`` (same name), in one write of the
        registry file: an import's consented update (an Ollama tag pulled again).

        Raises:
            InvalidConfig: a bad manifest, another name, or the registered entry is no longer
                ``replacing`` (changed meanwhile: nothing is written).
            BackendError: the registry cannot be saved.
        """
        self._entries.replace(check_manifest(manifest), replacing=replacing)

    def add_ollama(self, name: str, tag: str) -> ModelManifest:
        """Register an Ollama model: format ollama, no pinned files, ``source.ollama_tag=tag``.

        Raises:
            InvalidConfig: a bad or taken ``name``, a ``tag`` with spaces or over 256 chars.
        """
        check_model_name(name)
        manifest = ModelManifest(
            name=name,
            format=ModelFormat.OLLAMA,
            root="",
            shards=(),
            source=ModelSource(ollama_tag=tag),
        )
        manifest = check_manifest(manifest)
        self._entries.insert(manifest)
        return manifest

    def remove(self, name: str) -> ModelManifest:
        """Forget the model ``name`` (its files are untouched) and return its manifest.

        Raises:
            UnknownModel: no model has that name.
        """
        return self._entries.remove(name)

    def list(self) -> tuple[ModelManifest, ...]:
        """Every registered manifest, sorted by name."""
        return self._entries.listed()

    def get(self, name: str) -> ModelManifest:
        """The manifest registered as ``name``.

        Raises:
            UnknownModel: no model has that name.
        """
        return self._entries.get(name)

    def resolve(
        self,
        name: str,
        *,
        on_progress: ProgressFn | None = None,
        signed_by: Sequence[str] = (),
    ) -> ResolvedModel:
        """Check the model's files and return their absolute paths, ready to launch.

        A file is re-hashed unless its stat is the one it had when it last passed, here or
        in the registry file's record (see the module docstring); a refused model is always
        re-hashed in full. ``root`` is the registered root with its symlinks resolved and
        every path is ``root / relative path``; an ollama model has ``root == Path()`` and no
        files. With ``signed_by`` (trust anchor names), the model must also carry a
        signature that one of them verifies (checked, not recorded: `require_signed`).

        Raises:
            UnknownModel: no model has that name.
            InvalidConfig: ``signed_by`` names an anchor the registry does not have.
            ModelNotReady: ``"model tiny is not ready: shard tiny.gguf: BLAKE3 differs ..."``
                for a missing, resized, tampered or escaping file, a signature that does not
                verify, or one not made by a required anchor (``"... not signed by any of
                the trust anchors ops: unsigned (no signature registered)"``); `PinMismatch`
                for all but a missing file.
        """
        manifest = self.get(name)
        also = self._checks.rules.known(signed_by)
        self._pin(manifest, on_progress, also).close()
        return attrs.evolve(resolved_model(manifest), signed_by=self.signed_by(manifest))

    def require_signed(self, name: str, signed_by: Sequence[str]) -> None:
        """Record that model ``name`` must be signed by one of the anchors ``signed_by`` at
        every later check in this registry object (a load does it once admitted), so a
        spawn of an entry swapped since is refused (``signing_rules.py``).

        Raises:
            InvalidConfig: ``signed_by`` names an anchor the registry does not have.
        """
        self._checks.rules.require(name, signed_by)

    def signed_by(self, manifest: ModelManifest) -> str | None:
        """Who signed ``manifest``: ``"ops: key sha256:74e77a506e308a1f..."`` as its last
        verification here found, else as registered; None when it carries no signature."""
        return self._checks.signed_by(manifest)

    def pin(self, manifest: ModelManifest, *, on_progress: ProgressFn | None = None) -> PinnedModel:
        """Check ``manifest``'s files as `resolve` does and return their descriptors, open.

        Each file is opened beneath the model root (never through a link that leads out of
        it) and checked from its descriptor: the cheap stat check, and a full BLAKE3 re-hash
        when the stamp differs from the one recorded at its last full hash. The caller owns
        the result and must `PinnedModel.close` it. Blocking; a re-hash reads every byte
        (about 1 s per GB here), so async callers run it in a thread.

        Raises:
            PinMismatch: a file is resized, differs or resolves outside the root (tampered).
            ModelNotReady: a file or the root is missing or unreadable.
        """
        return self._pin(manifest, on_progress)

    def _pin(
        self, manifest: ModelManifest, on_progress: ProgressFn | None, also: tuple[str, ...] = ()
    ) -> PinnedModel:
        result = self._checks.check(manifest, force_full=False, on_progress=on_progress, also=also)
        if isinstance(result, CheckFailure):
            raise _refusal(manifest.name, result)
        return result

    def verify(
        self, name: str | None = None, *, on_progress: ProgressFn | None = None
    ) -> builtins.list[ModelCheck]:
        """Fully re-hash one model (or every model, by name) and report each outcome.

        A passing check clears a sticky refusal. A failing model is reported, not raised.

        Raises:
            UnknownModel: ``name`` is given and not registered.
        """
        manifests = [self.get(name)] if name is not None else builtins.list(self.list())
        checks = []
        for manifest in manifests:
            result = self._checks.check(manifest, force_full=True, on_progress=on_progress)
            if isinstance(result, CheckFailure):
                checks.append(ModelCheck(manifest.name, False, result.reason))
            else:
                result.close()
                reason = _ok_reason(manifest, self._checks.signed_by(manifest))
                checks.append(ModelCheck(manifest.name, True, reason))
        return checks


def _refusal(name: str, failure: CheckFailure) -> ModelNotReady:
    message = f"model {name} is not ready: {failure.reason}"
    if failure.sticky:
        return PinMismatch(message, name, failure.file, failure.reason)
    return ModelNotReady(message)


def _ok_reason(manifest: ModelManifest, signer: str | None) -> str:
    if manifest.format is ModelFormat.OLLAMA:
        return f"ollama tag {manifest.source.ollama_tag}: no files pinned (Ollama keeps them)"
    count = len(manifest.shards) + len(manifest.tokenizer)
    signed = f", signed by {signer}" if signer is not None else ""
    return f"{count} file{'s' if count != 1 else ''} verified{signed}"
