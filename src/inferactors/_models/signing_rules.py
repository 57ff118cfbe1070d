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
disjoint sets of anchors is refused for both).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import attrs

from .._errors import InvalidConfig, shown
from .anchors import TrustAnchors
from .hashing import CheckFailure
from .manifest import ModelManifest
from .oms import SignedFiles, short_signer
from .pinning import PinnedModel


@attrs.define(eq=False)
class SigningRules:
    """The registry's trust anchors and the requirements loads stated (module docstring)."""

    anchors: TrustAnchors = TrustAnchors()  # noqa: RUF009  (frozen value)
    _required: dict[str, set[tuple[str, ...]]] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

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

    def check(
        self, pinned: PinnedModel, verified: SignedFiles | None, only: tuple[str, ...] = ()
    ) -> PinnedModel | CheckFailure:
        """``pinned`` when its model meets every requirement recorded on its name (or, with
        ``only``, that one requirement instead), else a sticky failure naming the signer
        found (or none) and the anchors expected (``pinned`` is closed then). ``verified``
        is what its signature's verification found, if any."""
        manifest = pinned.manifest
        if only:
            required = [only]
        else:
            with self._lock:
                required = sorted(self._required.get(manifest.name, ()))
        anchor = verified.anchor if verified is not None else None
        for anchors in required:
            if anchor not in anchors:
                pinned.close()
                signer = describe(manifest, verified)
                found = f"signed by {signer}" if signer else "unsigned (no signature registered)"
                path = manifest.signature.file.path if manifest.signature is not None else ""
                return CheckFailure(
                    f"not signed by any of the trust anchors {', '.join(anchors)}: {found}",
                    sticky=True,
                    file=path,
                )
        return pinned

    def describe(self, manifest: ModelManifest, verified: SignedFiles | None) -> str | None:
        """`describe` (for the registry's use)."""
        return describe(manifest, verified)


def describe(manifest: ModelManifest, verified: SignedFiles | None) -> str | None:
    """``"ops: key sha256:74e77a506e308a1f..."`` (the anchor, then the signer) from
    ``verified``, else from the manifest's registered signature; None for a model without
    one."""
    if verified is not None:
        return f"{verified.anchor}: {short_signer(verified.signer)}"
    signature = manifest.signature
    if signature is None:
        return None
    return f"{signature.anchor}: {short_signer(signature.signer)}"
