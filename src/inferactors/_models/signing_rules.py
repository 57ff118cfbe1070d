"""Who must have signed a model: the trust anchors and the "signed by one of" requirements.

A spec that names anchors (its ``signed_by``) requires its models to carry a signature
verified by one of them: admission checks it (`ModelRegistry.resolve`'s ``signed_by``), and
a load that succeeded records it (`ModelRegistry.require_signed`). The registry keeps each
recorded requirement by model name for as long as it lives, and every check of that name
must meet all of them: a spawn after the registry entry was swapped for an unsigned model,
or one signed by another key, is refused like a changed byte (tampering), not only the load
that stated it. Requirements are never
dropped: an instance removed from the run file leaves its requirement behind, which can
only refuse more, never less (one model required by two instances to be signed by two
disjoint sets of anchors is refused for both). A requirement is met by any anchor that
verifies the signature (two anchors may hold one key). When a reload swaps the anchors in
(`SigningRules.use_anchors`), each requirement keeps only the anchors still configured.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import attrs

from .._errors import InvalidConfig, shown
from .anchors import LiveAnchors, TrustAnchors
from .hashing import CheckFailure
from .manifest import ModelManifest
from .oms import SignedFiles, short_signer
from .pinning import PinnedModel


@attrs.define(eq=False)
class SigningRules:
    """The registry's trust anchors and the requirements loads stated (module docstring).

    The anchors are `LiveAnchors`: a reload swaps in the anchor files as they are now
    (`use_anchors`), and every verification made under the old ones is made again.
    """

    live: LiveAnchors = attrs.field(factory=LiveAnchors)
    _required: dict[str, set[tuple[str, ...]]] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @property
    def anchors(self) -> TrustAnchors:
        """The trust anchors signatures are verified against now."""
        return self.live.current

    def use_anchors(self, anchors: TrustAnchors) -> bool:
        """Verify against ``anchors`` from now on (whether they changed anything). A
        recorded requirement keeps only the anchors still configured (it can only refuse
        more); one left with none is dropped: no instance of a valid run file states it."""
        with self._lock:
            if not self.live.replace(anchors):
                return False
            names = set(anchors.names())
            for name, sets in list(self._required.items()):
                kept = {tuple(a for a in each if a in names) for each in sets}
                kept.discard(())
                if kept:
                    self._required[name] = kept
                else:
                    del self._required[name]
            return True

    def known(self, signed_by: Sequence[str]) -> tuple[str, ...]:
        """``signed_by``, sorted without repeats, once every name is a configured anchor.

        Raises:
            InvalidConfig: ``signed_by[0]: no trust anchor named 'x' (configured: ops)``.
        """
        names = self.anchors.names()
        for index, anchor in enumerate(signed_by):
            if anchor not in names:
                raise InvalidConfig(
                    f"signed_by[{index}]: no trust anchor named {shown(anchor)} "
                    f"(configured: {self.anchors.described()})"
                )
        return tuple(sorted(set(signed_by)))

    def require(self, name: str, signed_by: Sequence[str]) -> None:
        """Require every later check of model ``name`` to find it signed by one of the
        anchors ``signed_by`` (nothing when it is empty).

        Raises:
            InvalidConfig: as `known`.
        """
        anchors = self.known(signed_by)
        if anchors:
            with self._lock:
                self._required.setdefault(name, set()).add(anchors)

    def expected(self, name: str) -> str:
        """The anchors a signature of model ``name`` must lead to, for a message: each
        recorded requirement (``"one of ops, corp"``, joined by ``" and "``), else any
        configured anchor (``"any of ops, corp"``, or ``"none configured"``)."""
        with self._lock:
            required = sorted(self._required.get(name, ()))
        if required:
            return " and ".join(f"one of {', '.join(anchors)}" for anchors in required)
        anchors = self.anchors
        return f"any of {anchors.described()}" if anchors else "none configured"

    def unmet(
        self, manifest: ModelManifest, verified: SignedFiles | None, only: tuple[str, ...] = ()
    ) -> str | None:
        """Why ``manifest`` does not meet every requirement recorded on its name (or, with
        ``only``, that one requirement instead), naming the signer found (or none) and the
        anchors expected; None when it does. ``verified`` is what its signature's
        verification found, if any: a requirement naming any anchor that verifies it is
        met."""
        if only:
            required = [only]
        else:
            with self._lock:
                required = sorted(self._required.get(manifest.name, ()))
        found = set(verified.anchors) if verified is not None else set()
        for anchors in required:
            if not found & set(anchors):
                signer = describe(manifest, verified)
                found_text = (
                    f"signed by {signer}" if signer else "unsigned (no signature registered)"
                )
                listed = ", ".join(anchors)
                return f"not signed by any of the trust anchors {listed}: {found_text}"
        return None

    def check(
        self, pinned: PinnedModel, verified: SignedFiles | None, only: tuple[str, ...] = ()
    ) -> PinnedModel | CheckFailure:
        """``pinned`` when its model meets the requirements (`unmet`), else a sticky
        failure saying why (``pinned`` is closed then)."""
        manifest = pinned.manifest
        why = self.unmet(manifest, verified, only)
        if why is None:
            return pinned
        pinned.close()
        path = manifest.signature.file.path if manifest.signature is not None else ""
        return CheckFailure(why, sticky=True, file=path)

    def describe(self, manifest: ModelManifest, verified: SignedFiles | None) -> str | None:
        """`describe` (for the registry's use)."""
        return describe(manifest, verified)


def describe(manifest: ModelManifest, verified: SignedFiles | None) -> str | None:
    """``"ops: key sha256:74e77a506e308a1f..."`` (the anchors that verify it, then the
    signer: ``"corp, ops: ..."`` when two hold its key) from ``verified``, else from the
    manifest's registered signature; None for a model without one."""
    if verified is not None:
        return f"{', '.join(verified.anchors)}: {short_signer(verified.signer)}"
    signature = manifest.signature
    if signature is None:
        return None
    return f"{signature.anchor}: {short_signer(signature.signer)}"
