"""Opening a runtime's model registry with the trust anchors of its config.

The one place a `ManagedConfig` (its ``registry`` file and ``trust_anchors``) becomes a
`ModelRegistry` whose signatures are verified against those anchors: the anchor files are
read and checked here, once per registry object (``_models/anchors.py``). Blocking: async
callers run it in a worker thread.
"""

from __future__ import annotations

from .._config.config import ManagedConfig
from .._models.anchors import AnchorKind, TrustAnchors
from .._models.registry import ModelRegistry


def trust_anchors(managed: ManagedConfig) -> TrustAnchors:
    """The trust anchors ``managed`` names, read and checked.

    Raises:
        InvalidConfig: ``managed.trust_anchors[0].public_key: /etc/ops.pub: not a PEM public
            key`` (a missing, oversized or malformed file).
        Unsupported: anchors are configured and the ``signing`` extra is not installed.
    """
    entries = [(a.name, AnchorKind(a.kind), a.path) for a in managed.trust_anchors]
    return TrustAnchors.read(entries, where="managed.trust_anchors")


def open_registry(managed: ManagedConfig) -> ModelRegistry:
    """``managed``'s registry file, verifying signatures against its trust anchors.

    Raises:
        InvalidConfig: as `trust_anchors`, or a malformed registry file.
        Unsupported: as `trust_anchors`.
        BackendError: the registry file cannot be read.
    """
    return ModelRegistry.open(managed.registry, anchors=trust_anchors(managed))
