"""Checking a registered model's OMS signature as part of its pin check.

A model registered with a signature (``ModelManifest.signature``) passes its check only if,
besides every pinned file matching its pin:

1. the signature file (itself a pinned file, so a changed ``model.sig`` is a changed pin)
   verifies offline against the registry's trust anchors (``oms.verify_signature``);
2. it signs exactly the files pinned: none pinned and unsigned, none signed and not pinned;
3. every signed digest equals the file's: the pin itself for a BLAKE3 signature, else the
   SHA-256 (or BLAKE2b) computed in the same read as the file's BLAKE3 at its last full
   hash in this process (`SignatureCheck.digests`).

The verification is repeated whenever any of the model's files is hashed in full (so a
changed file is never trusted on the old signature), at the first check of the manifest in
a registry object, on every full check (``models verify``, a sticky refusal), and at the
first check after the trust anchors were swapped (a reload re-read them:
`anchors.LiveAnchors`). A check
whose files all pass on their stamps reuses the last verification: the signature file's
own stamp is among them. For a non-BLAKE3 signature, a file's stamp spares it its hash only
if this process hashed it (the persisted record knows BLAKE3 digests only).

Any failure is tampering (a sticky `CheckFailure` naming the signature file, the signer
found and the anchors expected), so it holds the instance down exactly as a changed byte
does (``design/pinning.md``); so is a signed model checked with no trust anchor configured,
and a signature file replaced or deleted while the model's files are all there
(`SignatureCheck.gone`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

import attrs

from .._errors import Unsupported
from .anchors import LiveAnchors, TrustAnchors
from .beneath import ModelTree, OutsideRoot
from .hashing import CheckFailure, FileStamp
from .manifest import ModelFile, ModelManifest, ModelSignature
from .oms import (
    MAX_SIGNATURE_BYTES,
    SINGLE_FILE,
    BadSignature,
    SignedFiles,
    short_signer,
    verify_signature,
)


@attrs.define
class HashNotes:
    """What one check hashed in full: each file's path and, when ``also`` names a second
    algorithm, its digest in that algorithm (else None). Filled in by ``pinning.check_file``."""

    also: str | None = None
    hashed: dict[str, str | None] = attrs.field(factory=dict)


@attrs.define(eq=False)
class SignatureCheck:
    """The signature state of one manifest in one registry object (guarded by its lock).

    Attributes:
        live: the registry's trust anchors, as a reload last re-read them.
        expected: the anchors a signature of this model must lead to, for a message
            (``"one of ops"``; `signing_rules.SigningRules.expected`).
        digests: each file's non-BLAKE3 signed digest at its last full hash here, with the
            stamp it had then.
        verified: what the last verification found, or None before one passed.
        verified_at: the anchors' generation that verification was made under.
    """

    live: LiveAnchors
    expected: Callable[[], str] = lambda: "any configured"
    digests: dict[str, tuple[FileStamp, str]] = attrs.field(factory=dict)
    verified: SignedFiles | None = None
    verified_at: int = -1

    def second_algorithm(self, manifest: ModelManifest) -> str | None:
        """The digest to compute beside BLAKE3 for ``manifest`` (its signature's, when that
        is not BLAKE3), else None."""
        signature = manifest.signature
        if signature is None or signature.algorithm == "blake3":
            return None
        return signature.algorithm

    def knows(self, path: str, stamp: FileStamp | None) -> bool:
        """Whether the second digest of ``path`` is known for the file as ``stamp`` says."""
        known = self.digests.get(path)
        return stamp is not None and known is not None and known[0] == stamp

    def current(self) -> bool:
        """Whether the last verification passed under the anchors in force now."""
        return self.verified is not None and self.verified_at == self.live.generation

    def after_files(
        self,
        manifest: ModelManifest,
        fds: Mapping[str, int],
        stamps: Mapping[str, FileStamp],
        notes: HashNotes,
        *,
        full: bool,
    ) -> CheckFailure | None:
        """Verify ``manifest``'s signature once all its files passed (module docstring).

        Args:
            manifest: the manifest checked; nothing to do when it has no signature.
            fds: each pinned file's open descriptor (the signature file's among them).
            stamps: each file's stamp as just checked.
            notes: what this check hashed in full.
            full: the check was a full one.

        Returns:
            None when it verifies (or there is no signature), else a sticky failure.
        """
        signature = manifest.signature
        if signature is None:
            return None
        for path, digest in notes.hashed.items():
            if digest is not None:
                self.digests[path] = (stamps[path], digest)
        if self.current() and not full and not notes.hashed:
            return None
        return self.verify_open(manifest, fds[signature.file.path])

    def verify_open(self, manifest: ModelManifest, fd: int) -> CheckFailure | None:
        """Verify ``manifest``'s signature from the signature file's open descriptor
        ``fd`` (its pinned bytes) against the anchors in force now, with the digests known
        for its files: None when it verifies, else a sticky failure naming the signer
        found and the anchors expected."""
        signature = manifest.signature
        assert signature is not None, "only a signed manifest is verified"
        self.verified = None
        generation = self.live.generation
        why = self._verify(manifest, signature, fd)
        if why is not None:
            return CheckFailure(
                f"signature {signature.file.path}: {why}", sticky=True, file=signature.file.path
            )
        self.verified_at = generation
        return None

    def gone(self, failure: CheckFailure, tree: ModelTree) -> CheckFailure:
        """The failure of the signature file's own pin (replaced, resized, deleted, made a
        link out of the root or a special file) as tampering: sticky, naming the signer
        of what lies there now (or none) and the anchors expected."""
        found = _signer_found(tree, failure.file, self.live.current)
        reason = f"{failure.reason}; signer found: {found}; anchors expected: {self.expected()}"
        return CheckFailure(reason, sticky=True, file=failure.file)

    def _verify(self, manifest: ModelManifest, signature: ModelSignature, fd: int) -> str | None:
        anchors = self.live.current
        if not anchors:
            return "no trust anchor is configured to verify it"
        if signature.file.size > MAX_SIGNATURE_BYTES:
            return f"larger than its limit of {MAX_SIGNATURE_BYTES >> 20} MiB"
        data = os.pread(fd, signature.file.size, 0)
        try:
            signed = verify_signature(data, anchors)
        except BadSignature as error:
            return f"does not verify: {error}; anchors expected: {self.expected()}"
        except Unsupported as error:
            return str(error)
        second = {path: digest for path, (_stamp, digest) in self.digests.items()}
        why = compare_signed(manifest, signed, second)
        if why is None:
            self.verified = signed
            return None
        return f"{why} (signed by {', '.join(signed.anchors)}: {short_signer(signed.signer)})"


def _signer_found(tree: ModelTree, path: str, anchors: TrustAnchors) -> str:
    """Who signed the signature file at ``path`` beneath ``tree`` as it is now: ``"none"``
    when it is missing or not a regular file, else the anchors and signer when it verifies,
    else why not (which names the signer the bundle claims)."""
    try:
        fd = tree.open(PurePosixPath(path))
    except (OSError, OutsideRoot):
        return "none (no signature file there)"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "none (not a regular file)"
        data = os.pread(fd, MAX_SIGNATURE_BYTES + 1, 0)
    except OSError as error:
        return f"unknown (unreadable: {error.strerror})"
    finally:
        os.close(fd)
    try:
        signed = verify_signature(data, anchors)
    except BadSignature as error:
        return str(error)
    except Unsupported as error:
        return f"unknown ({error})"
    return f"{', '.join(signed.anchors)}: {short_signer(signed.signer)}"


def model_files(manifest: ModelManifest) -> tuple[ModelFile, ...]:
    """The files a signature of ``manifest`` must sign: its shards and other pinned files."""
    return manifest.shards + manifest.tokenizer


def compare_signed(
    manifest: ModelManifest, signed: SignedFiles, second: Mapping[str, str]
) -> str | None:
    """Why ``signed`` does not sign exactly ``manifest``'s files with their digests, or None.

    ``second`` holds each file's digest in the signature's algorithm when that is not BLAKE3
    (a BLAKE3 signature is compared with the pins). A signature made on a single file
    (OMS names its one file ``"."``) matches a manifest pinning exactly one file.
    """
    signature = manifest.signature
    if signature is not None and signed.algorithm != signature.algorithm:
        return f"signs {signed.algorithm} digests, but {signature.algorithm} ones were registered"
    files = {f.path: f for f in model_files(manifest)}
    names = dict(signed.files)
    if set(names) == {SINGLE_FILE} and len(files) == 1:
        names = {next(iter(files)): names[SINGLE_FILE]}
    unsigned = sorted(set(files) - set(names))
    if unsigned:
        listed, verb = _listed(unsigned)
        return f"{listed} {verb} pinned but not signed by it"
    unpinned = sorted(set(names) - set(files))
    if unpinned:
        listed, verb = _listed(unpinned)
        return f"it signs {listed}, which {verb} not among the pinned files"
    for path, file in files.items():
        have = file.blake3 if signed.algorithm == "blake3" else second.get(path)
        if have != names[path]:
            return f"{path}: its {signed.algorithm} digest differs from the signed one"
    return None


def _listed(paths: list[str]) -> tuple[str, str]:
    """Up to five paths for a message, and the verb that agrees with them."""
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    return ", ".join(paths[:5]) + more, "is" if len(paths) == 1 else "are"
