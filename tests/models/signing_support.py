"""Keys, certificates and real OpenSSF Model Signing signatures for the signing tests.

Every signature here is made by the ``model-signing`` package's own public API
(``model_signing.signing.Config``), never by inferactors; keys and certificates are made on
the spot with ``cryptography``. Imported as ``models.signing_support``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from pathlib import Path

import attrs
import model_signing.hashing
import model_signing.signing
import model_signing.verifying
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from inferactors._models.anchors import AnchorKind, TrustAnchors


@attrs.frozen
class KeyPair:
    """A P-256 key pair written as PEM files: ``private`` (PKCS#8) and ``public`` (SPKI)."""

    private: Path
    public: Path


def make_key(directory: Path, name: str, curve: ec.EllipticCurve | None = None) -> KeyPair:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private = directory / f"{name}.key"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = directory / f"{name}.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return KeyPair(private, public)


@attrs.frozen
class CertifiedKey:
    """A signing key with its certificate, issued by ``root`` (a self-signed CA)."""

    key: Path
    certificate: Path
    root: Path


def make_certified_key(
    directory: Path,
    subject: str,
    *,
    root_name: str,
    purposes: list[x509.ObjectIdentifier] | None = None,
    starts_in: datetime.timedelta = datetime.timedelta(0),
) -> CertifiedKey:
    """A self-signed root CA (``<root_name>.pem``) and a leaf for ``subject`` it issued,
    allowed to sign (digital signature key usage); with ``purposes``, an extended key
    usage listing them; ``starts_in`` moves the leaf's validity (a day before to 30 days
    after now) that far (and the root's too, when it is negative)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    root_key = ec.generate_private_key(ec.SECP256R1())
    earlier = now + min(starts_in, datetime.timedelta(0))  # a past leaf has a past root
    root = _certificate(root_name, root_key, root_name, root_key, ca=True, now=earlier)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _certificate(
        subject, leaf_key, root_name, root_key, ca=False, now=now + starts_in, purposes=purposes
    )
    paths = CertifiedKey(
        directory / f"{subject}.key", directory / f"{subject}.pem", directory / f"{root_name}.pem"
    )
    paths.key.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths.certificate.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths.root.write_bytes(root.public_bytes(serialization.Encoding.PEM))
    return paths


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    now: datetime.datetime,
    purposes: list[x509.ObjectIdentifier] | None = None,
) -> x509.Certificate:
    usage = x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(usage, critical=True)
    )
    if purposes is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _hashing(algorithm: str, *, ignore: list[str], symlinks: bool) -> model_signing.hashing.Config:
    config = model_signing.hashing.Config().use_file_serialization(  # type: ignore[no-untyped-call]
        hashing_algorithm=algorithm,  # type: ignore[arg-type]  # checked by the package
        allow_symlinks=symlinks,
    )
    return config.set_ignored_paths(paths=ignore, ignore_git_paths=True)


def oms_sign(
    model: Path,
    signature: Path,
    key: Path,
    *,
    algorithm: str = "sha256",
    symlinks: bool = False,
) -> Path:
    """Sign ``model`` with the ``model-signing`` package and a bare key (its default digest,
    SHA-256, unless ``algorithm`` says otherwise); the signature itself is left out."""
    ignore = [signature.name] if model.is_dir() and signature.parent == model else []
    config = model_signing.signing.Config()  # type: ignore[no-untyped-call]
    config.use_elliptic_key_signer(private_key=key)
    config.set_hashing_config(_hashing(algorithm, ignore=ignore, symlinks=symlinks))
    config.sign(model, signature)
    return signature


def oms_sign_certificate(
    model: Path, signature: Path, signer: CertifiedKey, *, algorithm: str = "sha256"
) -> Path:
    """Sign ``model`` with the ``model-signing`` package and a certificate, the bundle
    carrying the leaf and its root."""
    ignore = [signature.name] if model.is_dir() and signature.parent == model else []
    config = model_signing.signing.Config()  # type: ignore[no-untyped-call]
    config.use_certificate_signer(
        private_key=signer.key,
        signing_certificate=signer.certificate,
        certificate_chain=[signer.root],
    )
    config.set_hashing_config(_hashing(algorithm, ignore=ignore, symlinks=False))
    config.sign(model, signature)
    return signature


def oms_verify(model: Path, signature: Path, public_key: Path) -> None:
    """Verify with the ``model-signing`` package's own public API (raises ValueError)."""
    config = model_signing.verifying.Config()  # type: ignore[no-untyped-call]
    config.use_elliptic_key_verifier(public_key=public_key)
    config.verify(model, signature)


def key_anchors(**keys: Path) -> TrustAnchors:
    """Trust anchors of public keys, by name."""
    return TrustAnchors.read((name, AnchorKind.PUBLIC_KEY, path) for name, path in keys.items())


def certificate_anchors(**roots: Path) -> TrustAnchors:
    """Trust anchors of root certificates, by name."""
    entries = ((name, AnchorKind.CERTIFICATE, path) for name, path in roots.items())
    return TrustAnchors.read(entries)


def craft_bundle(
    key: Path, resources: list[dict[str, str]], out: Path, *, hint: str | None = None
) -> Path:
    """A sigstore bundle as model-signing writes one, but over a statement of our making
    (``resources``: ``{"name", "digest", "algorithm"}`` each), signed with the P-256 key
    ``key``: what a trusted signer's own tool could produce. ``hint`` replaces the key's
    hint (the SHA-256 of its public PEM)."""
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    subject = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources))
    serialization_: dict[str, object] = {
        "method": "files",
        "hash_type": resources[0]["algorithm"],
        "allow_symlinks": False,
        "ignore_paths": ["model.sig"],
    }
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "model", "digest": {"sha256": subject.hexdigest()}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {"serialization": serialization_, "resources": resources},
    }
    raw = json.dumps(statement).encode()
    kind = "application/vnd.in-toto+json"
    pae = b" ".join([f"DSSEv1 {len(kind)} {kind} {len(raw)}".encode(), raw])
    signature = private.sign(pae, ec.ECDSA(hashes.SHA256()))
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "publicKey": {"hint": hint if hint is not None else hashlib.sha256(public).hexdigest()},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(raw).decode(),
            "payloadType": kind,
            "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
        },
    }
    out.write_text(json.dumps(bundle))
    return out
