"""The check state a registry keeps for each manifest, and one check of it.

`ModelChecks` is `registry.ModelRegistry`'s checker: for each manifest it has seen, the
stamps of its files at their last full hash, whether it was refused (a sticky refusal makes
every later check a full one until one passes), and its signature's state; and the
registry's persisted record of verified files and its signing rules. `ModelChecks.check`
runs `pinning.open_and_check` under the manifest's own lock, then the "signed by one of"
requirements (``signing_rules.py``). Blocking; safe to call from several threads.
"""

from __future__ import annotations

import threading
from functools import partial

import attrs

from .anchors import TrustAnchors
from .hashing import CheckFailure, FileHasher, FileStamp, ProgressFn
from .manifest import ModelManifest
from .pinning import PinnedModel, open_and_check
from .signature_check import SignatureCheck
from .signing_rules import SigningRules
from .verified_record import VerifiedRecord


@attrs.define(eq=False)
class _ModelState:
    """Check state of one manifest, guarded by its own lock."""

    signing: SignatureCheck
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    refused: str | None = None
    stamps: dict[str, FileStamp] = attrs.field(factory=dict)


@attrs.define(eq=False)
class ModelChecks:
    """Checks manifests' files and signatures, remembering what passed (module docstring).

    Attributes:
        hasher: hashes a descriptor.
        rules: the trust anchors and recorded "signed by one of" requirements.
        record: the registry file's persisted record of verified files, if any.
    """

    hasher: FileHasher
    rules: SigningRules
    record: VerifiedRecord | None = None
    _states: dict[ModelManifest, _ModelState] = attrs.field(factory=dict)
    _signers: dict[str, str | None] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def check(
        self,
        manifest: ModelManifest,
        *,
        force_full: bool,
        on_progress: ProgressFn | None,
        also: tuple[str, ...] = (),
    ) -> PinnedModel | CheckFailure:
        """Check ``manifest`` (full: every file hashed, no stamp or record trusted, when
        forced or for a manifest refused before), then the recorded requirements on its
        name and ``also``, one more requirement that is not recorded (its failure is not a
        sticky refusal). On success the caller owns the open descriptors, which re-check
        their signature when the anchors change (`PinnedModel.changed`)."""
        state = self._state(manifest)
        with state.lock:
            full = force_full or state.refused is not None
            result = open_and_check(
                manifest,
                state.stamps,
                full=full,
                hasher=self.hasher,
                record=self.record,
                on_progress=on_progress,
                signing=state.signing,
            )
            if isinstance(result, PinnedModel):
                result = self.rules.check(result, state.signing.verified)
            if isinstance(result, PinnedModel) and also:
                result = self.rules.check(result, state.signing.verified, also)
                if isinstance(result, CheckFailure):
                    return result  # this caller's requirement only: not a sticky refusal
            if isinstance(result, PinnedModel):
                state.refused = None
                result.recheck = partial(self._recheck, self.rules.live.generation)
                self._seen(manifest, self.rules.describe(manifest, state.signing.verified))
            elif result.sticky:
                state.refused = result.reason
                self._seen(manifest, None)
            if self.record is not None:
                self.record.save()
        return result

    def signed_by(self, manifest: ModelManifest) -> str | None:
        """Who signed ``manifest`` (``"ops: key sha256:74e77a506e308a1f..."``), as its last
        verification here found, else as registered; None when it carries no signature."""
        with self._lock:
            state = self._states.get(manifest)
        verified = state.signing.verified if state is not None else None
        return self.rules.describe(manifest, verified)

    def signer_seen(self, name: str) -> str | None:
        """Who signed model ``name`` as the last check of that name here found it
        (``"ops: key sha256:..."``): None before any, for an unsigned model, or when that
        check refused it (tampered, or no longer verified by the anchors)."""
        with self._lock:
            return self._signers.get(name)

    def use_anchors(self, anchors: TrustAnchors) -> bool:
        """Verify against ``anchors`` from now on (`SigningRules.use_anchors`); whether
        they changed. Every signature is verified again at its next check, and each
        server's held pin at its next `PinnedModel.changed`."""
        return self.rules.use_anchors(anchors)

    def _recheck(self, generation: int, pinned: PinnedModel) -> CheckFailure | None:
        """`PinnedModel.recheck`: nothing while the anchors are those of its check; else
        its signature verified again from its held descriptors, and the requirements.
        Never waits for a check of the same manifest running in another thread (it is
        called from an event loop): tried again at the next call then."""
        if self.rules.live.generation == generation:
            return None
        manifest = pinned.manifest
        state = self._state(manifest)
        if not state.lock.acquire(blocking=False):
            return None
        try:
            now = self.rules.live.generation
            failure = None
            signature = manifest.signature
            if signature is not None:
                failure = state.signing.verify_open(manifest, pinned.fds[signature.file.path])
            if failure is None:
                why = self.rules.unmet(manifest, state.signing.verified)
                path = signature.file.path if signature is not None else ""
                failure = None if why is None else CheckFailure(why, sticky=True, file=path)
            if failure is not None:
                state.refused = failure.reason
                self._seen(manifest, None)
                return failure
            pinned.recheck = partial(self._recheck, now)
            self._seen(manifest, self.rules.describe(manifest, state.signing.verified))
            return None
        finally:
            state.lock.release()

    def _seen(self, manifest: ModelManifest, signer: str | None) -> None:
        with self._lock:
            self._signers[manifest.name] = signer

    def _state(self, manifest: ModelManifest) -> _ModelState:
        with self._lock:
            state = self._states.get(manifest)
            if state is None:
                expected = partial(self.rules.expected, manifest.name)
                signing = SignatureCheck(self.rules.live, expected)
                state = self._states[manifest] = _ModelState(signing)
            return state
