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

import attrs

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
        sticky refusal). On success the caller owns the open descriptors."""
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
            elif result.sticky:
                state.refused = result.reason
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

    def _state(self, manifest: ModelManifest) -> _ModelState:
        with self._lock:
            state = self._states.get(manifest)
            if state is None:
                state = self._states[manifest] = _ModelState(SignatureCheck(self.rules.anchors))
            return state
