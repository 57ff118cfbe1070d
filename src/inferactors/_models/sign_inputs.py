"""What ``models sign`` reads and writes besides the model: the signing key and certificate,
checked before anything is hashed, and the signature file, written as a new file.

The key must be what OpenSSF Model Signing signs with (an unencrypted PEM elliptic-curve
key on P-256, P-384 or P-521); an Ed25519 or RSA key, an encrypted key, a certificate that
is not the key's, or a certificate without its issuers is refused naming the option, before
anything is read. The signature is written as root may be asked to write it, into a folder
others may write to: never through a link or onto a special file planted at its name, and
never onto one of the model's own files (`check_target`); the bytes go to a new file made
in that folder with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and are renamed over the name
(``_atomic_file.write_atomically``), so a link planted there is replaced, not followed, and
a failure or an interrupt leaves what was there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .._errors import InvalidConfig
from .._safe_json import NotJson, parse_json
from .oms import MAX_SIGNATURE_BYTES

KEY_HELP = "make one with: openssl ecparam -name prime256v1 -genkey -noout -out signing.key"
_CURVES = ("secp256r1", "secp384r1", "secp521r1")
_BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle"


def signing_key_identity(key_pem: bytes, certificate_pem: bytes | None = None) -> str:
    """Check the private key ``key_pem`` (and the certificate ``certificate_pem`` it signs
    with, if any) and return its public key's identity, ``key sha256:<hex>``.

    Raises:
        InvalidConfig: ``--private-key: an Ed25519 key: ...`` (not elliptic-curve P-256,
            P-384 or P-521), an encrypted or unreadable key, or ``--certificate: ...`` a
            certificate that is not PEM X.509 or not this key's.
    """
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from .anchors import key_identity

    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise InvalidConfig(
            "--private-key: the key is encrypted: give it unencrypted (openssl pkey -in KEY "
            "-out PLAIN.key)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidConfig(f"--private-key: not a PEM private key ({KEY_HELP})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _CURVES:
        kind = _key_kind(key)
        raise InvalidConfig(
            f"--private-key: {kind}: OpenSSF Model Signing signs with elliptic-curve keys on "
            f"P-256, P-384 or P-521 only ({KEY_HELP})"
        )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if certificate_pem is not None:
        try:
            certificate = x509.load_pem_x509_certificate(certificate_pem)
        except ValueError:
            raise InvalidConfig("--certificate: not a PEM X.509 certificate") from None
        mine = certificate.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if mine != public:
            raise InvalidConfig("--certificate: it certifies another key than --private-key")
    return key_identity(public)


def _key_kind(key: object) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "an Ed25519 key"
    if isinstance(key, ed448.Ed448PrivateKey):
        return "an Ed448 key"
    if isinstance(key, rsa.RSAPrivateKey):
        return f"an RSA key ({key.key_size} bits)"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return f"an elliptic-curve key on {key.curve.name}"
    return f"a {type(key).__name__.removeprefix('_')} key"


def check_target(model: Path, target: Path) -> str | None:
    """Check that the signature may be written at ``target`` for ``model`` and return its
    path relative to the model folder when it lies beneath it (to leave it out of what is
    signed), else None.

    Raises:
        InvalidConfig: ``--signature: ...``: the name is a symbolic link, a folder or a
            special file; it is the model's file, or a file of the model folder that is
            not a signature (``config.json``); or its folder is missing.
    """
    where = f"--signature: {target}"
    folder = target.parent
    if not folder.is_dir():
        raise InvalidConfig(f"{where}: its folder {folder} is missing")
    try:
        info = target.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise InvalidConfig(f"{where}: is a symbolic link: never written through; remove it")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InvalidConfig(f"{where}: is not a regular file; remove it or name another")
    here = Path(os.path.abspath(target))
    if model.is_dir():
        root = Path(os.path.abspath(model))
        if not here.is_relative_to(root):
            return None
        if info is not None and not _is_signature(target):
            raise InvalidConfig(
                f"{where}: is a file of the model (not a signature): name a new file"
            )
        return here.relative_to(root).as_posix()
    if info is not None and (
        here == Path(os.path.abspath(model)) or os.path.samefile(model, target)
    ):
        raise InvalidConfig(f"{where}: is the model file itself: name another file")
    return None


def _is_signature(path: Path) -> bool:
    """Whether ``path`` holds a sigstore bundle (a signature written before: re-signing
    replaces it)."""
    from .._untrusted_file import read_capped

    try:
        data = parse_json(read_capped(path, MAX_SIGNATURE_BYTES, "signature"))
    except (OSError, InvalidConfig, NotJson):
        return False
    media = data.get("mediaType") if isinstance(data, dict) else None
    return isinstance(media, str) and media.startswith(_BUNDLE_TYPE)
