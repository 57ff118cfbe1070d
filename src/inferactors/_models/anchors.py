"""Trust anchors: the public keys and certificate roots a model's signature must lead to.

A `TrustAnchor` is a name and one PEM file: an elliptic-curve public key (P-256, P-384 or
P-521: the keys OpenSSF Model Signing signs with) or one or more X.509 root certificates.
They come from the run file's ``[[managed.trust_anchors]]`` or the library's
``ManagedConfig.trust_anchors``, never from the registry file: whoever may write the
registry must not be able to vouch for what it pins. Each file is read once, when the
anchors are loaded (a regular file of at most 256 KiB, `inferactors._untrusted_file`), and
checked by parsing it, which needs the ``signing`` extra (``oms.py``).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

from .._errors import InvalidConfig, Unsupported, shown
from .._untrusted_file import read_capped

SIGNING_EXTRA = "pip install -e '.[signing]' in the inferactors clone (it is not on PyPI)"
"""How to install what signatures need."""

MAX_ANCHOR_BYTES = 256 * 1024
"""The largest anchor file read (a PEM key is under 1 KiB, a certificate a few KiB)."""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}")
_CURVES = ("secp256r1", "secp384r1", "secp521r1")


class AnchorKind(enum.StrEnum):
    """What an anchor file holds; the value is the run file's key that names the file."""

    PUBLIC_KEY = "public_key"
    CERTIFICATE = "certificate"


@attrs.frozen
class TrustAnchor:
    """One trust anchor: ``name`` (a plain token of 1 to 64 characters), its kind, the PEM
    bytes as read, and ``origin``, the file they came from (for messages)."""

    name: str
    kind: AnchorKind
    pem: bytes = attrs.field(repr=False)
    origin: str


@attrs.frozen
class TrustAnchors:
    """The trust anchors a registry verifies signatures against, in configured order.

    Empty means none is configured: a model registered with a signature then fails its
    check (it cannot be verified), and a model without one is unaffected.
    """

    anchors: tuple[TrustAnchor, ...] = ()

    @classmethod
    def read(
        cls, entries: Iterable[tuple[str, AnchorKind, Path]], *, where: str = "trust_anchors"
    ) -> TrustAnchors:
        """Read and check each ``(name, kind, path)``.

        Raises:
            InvalidConfig: naming the entry, ``trust_anchors[1].public_key: /etc/ops.pub:
                not a PEM public key``: a bad or repeated name, a file that is missing, not a
                regular file, over 256 KiB, or holds no key or certificate of that kind.
            Unsupported: the ``signing`` extra is not installed (the message says how to
                install it).
        """
        anchors: list[TrustAnchor] = []
        for index, (name, kind, path) in enumerate(entries):
            field = f"{where}[{index}]"
            check_anchor_name(name, f"{field}.name")
            if any(anchor.name == name for anchor in anchors):
                raise InvalidConfig(f"{field}.name: {shown(name)} names two trust anchors")
            pem = _read_pem(path, f"{field}.{kind.value}")
            check_anchor_pem(kind, pem, f"{field}.{kind.value}: {path}")
            anchors.append(TrustAnchor(name, kind, pem, str(path)))
        return cls(tuple(anchors))

    def __iter__(self) -> Iterator[TrustAnchor]:
        return iter(self.anchors)

    def __len__(self) -> int:
        return len(self.anchors)

    def names(self) -> tuple[str, ...]:
        """Every anchor's name, in configured order."""
        return tuple(anchor.name for anchor in self.anchors)

    def described(self) -> str:
        """The names for a message: ``"ops, corp-ca"``, or ``"none configured"``."""
        return ", ".join(self.names()) or "none configured"


@attrs.define(eq=False)
class LiveAnchors:
    """The trust anchors a registry object verifies against now.

    A reload re-reads the anchor files and `replace` swaps them in whole; ``generation``
    counts the swaps that changed anything, so a verification made under older anchors
    (a running server's pin, a cached check) knows it must be made again.
    """

    current: TrustAnchors = TrustAnchors()
    generation: int = 0

    def replace(self, anchors: TrustAnchors) -> bool:
        """Use ``anchors`` from now on; whether they differ from the current ones (names,
        kinds or file contents)."""
        if anchors == self.current:
            return False
        self.current = anchors
        self.generation += 1
        return True


def check_anchor_name(name: object, where: str) -> str:
    """Return ``name`` if it is a plain token of 1 to 64 characters.

    Raises:
        InvalidConfig: naming ``where``.
    """
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise InvalidConfig(
            f"{where}: {shown(name)} is not a trust anchor name (1 to 64 characters: a letter "
            "or digit, then letters, digits and . _ + : -)"
        )
    return name


def _read_pem(path: Path, where: str) -> bytes:
    try:
        return read_capped(path, MAX_ANCHOR_BYTES, "trust anchor")
    except InvalidConfig as error:
        raise InvalidConfig(f"{where}: {error}") from None
    except OSError as error:
        raise InvalidConfig(f"{where}: cannot read {path}: {error.strerror}") from None


def missing_extra(what: str) -> Unsupported:
    """The error for ``what`` needing the ``signing`` extra that is not installed."""
    return Unsupported(f"{what} needs the signing extra (OpenSSF Model Signing): {SIGNING_EXTRA}")


def check_anchor_pem(kind: AnchorKind, pem: bytes, where: str) -> None:
    """Check that ``pem`` holds what an anchor of ``kind`` needs.

    Raises:
        InvalidConfig: ``"<where>: not a PEM public key"``, a key that is not elliptic-curve
            P-256, P-384 or P-521, or no PEM certificate.
        Unsupported: the ``signing`` extra is not installed.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise missing_extra(f"{where.split(':')[0]}: a trust anchor") from None
    if kind is AnchorKind.CERTIFICATE:
        try:
            x509.load_pem_x509_certificates(pem)
        except ValueError:
            raise InvalidConfig(f"{where}: holds no PEM certificate") from None
        return
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise InvalidConfig(f"{where}: not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _CURVES:
        raise InvalidConfig(
            f"{where}: not an elliptic-curve P-256, P-384 or P-521 public key "
            "(the keys OpenSSF Model Signing signs with)"
        )


def key_identity(pem: bytes) -> str:
    """``key sha256:<hex>``: the SHA-256 of the public key's PEM (SubjectPublicKeyInfo), the
    hint an OMS bundle signed with that key carries."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pem)
    spki = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"key sha256:{hashlib.sha256(spki).hexdigest()}"
