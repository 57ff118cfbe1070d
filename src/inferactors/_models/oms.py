"""OpenSSF Model Signing (OMS) through the ``model-signing`` package: the only module that
imports it.

An OMS signature is a sigstore bundle (``model.sig``) whose DSSE envelope signs an in-toto
statement listing every file of the model with its digest. The bundle format, the DSSE
envelope, the statement and the signature checks are all ``model-signing``'s own; we never
parse or write them by hand. What we add:

- `verify_signature` checks a bundle's signature **offline** against our trust anchors (an
  elliptic-curve public key, or X.509 roots its certificate chain must lead to) and returns
  the signed file list, without hashing anything: the registry compares that list with
  the files it pins and the digests it verified itself (``signature_check.py``). The
  package's own ``verifying.Config.verify`` would hash the whole model again by path; we
  call the key and certificate verifiers beneath it (its ``_signing`` modules, hence the
  exact version pin in ``pyproject.toml``).
- The bundle comes from bytes we read ourselves (capped, from the pinned descriptor) and is
  checked by our one safe JSON parser before the package reads it.
- `sign_model` signs with ``model-signing``'s public signing API, so its own
  ``model_signing verify`` accepts what we write.

The package and its dependencies (sigstore, pyOpenSSL, about 90 MB, 0.7 s to import) are the
optional ``signing`` extra, imported on first use; without it every entry point raises
`Unsupported` saying how to install it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from .._errors import InvalidConfig, cut, printable
from .._safe_json import NotJson, parse_json
from .anchors import AnchorKind, TrustAnchor, TrustAnchors, key_identity, missing_extra
from .manifest import SIGNED_ALGORITHMS
from .signing_certificate import certificate_name, signing_certificate_problem

if TYPE_CHECKING:
    from model_signing._signing.sign_sigstore_pb import Signature

MAX_SIGNATURE_BYTES = 4 << 20
"""The largest signature file read: a bundle is about 1 KiB plus 150 bytes per signed file."""

SINGLE_FILE = "."
"""The name OMS gives the one file of a model signed as a single file."""


class BadSignature(Exception):
    """A signature that does not verify, or a bundle that cannot be read; the message says
    why in words, naming the signer the bundle claims when it names one."""


@attrs.frozen
class SignedFiles:
    """What a verified signature signs.

    Attributes:
        anchors: every trust anchor that verifies it, in configured order (two anchors may
            hold one key, or two roots issue one chain): a requirement naming any of them
            is met.
        signer: ``key sha256:<64 hex>`` or ``certificate <subject>``.
        algorithm: the digest every file is signed with (``blake3``, ``sha256``, ``blake2``).
        files: each signed file's name (relative path, or ``"."`` for a single-file model)
            and its digest in lower-case hex.
    """

    anchors: tuple[str, ...]
    signer: str
    algorithm: str
    files: dict[str, str]

    @property
    def anchor(self) -> str:
        """The first anchor that verifies it (the one recorded at registration)."""
        return self.anchors[0]


def verify_signature(data: bytes, anchors: TrustAnchors) -> SignedFiles:
    """Verify the OMS bundle ``data`` against ``anchors``, offline, and return what it signs.

    A bundle signed with a key names it (its SHA-256 hint): the anchor with that key verifies
    it. A bundle signed with a certificate carries its chain: each certificate anchor is
    tried as the root, at the signing certificate's own start of validity (as the
    ``model-signing`` tool does). Blocking, about 0.3 ms once the package is imported.

    Raises:
        BadSignature: not a bundle, a Sigstore keyless bundle (it needs the network), no
            anchor for its key or chain, a signature that does not verify, or a statement
            that does not sign per file (``"signed by key sha256:ab12...: none of the trust
            anchors (ops, corp) holds that key"``).
        Unsupported: the ``signing`` extra is not installed.
    """
    signature = _read_bundle(data)
    claimed = claimed_signer(signature)
    if claimed.startswith("key "):
        verified = _by_key(signature, claimed, anchors)
    else:
        verified = _by_certificate(signature, claimed, anchors)
    return verified


def claimed_signer(signature: Signature) -> str:
    """Who the bundle says signed it, before any check: ``key sha256:<hex>`` (its hint) or
    ``certificate <subject>`` (its signing certificate).

    Raises:
        BadSignature: it names neither.
    """
    material = signature.bundle.verification_material
    if material.public_key is not None:
        hint = material.public_key.hint
        if not hint:
            raise BadSignature(
                "the bundle names no public key (no publicKey.hint): re-sign it with "
                "model-signing 1.0 or later"
            )
        return f"key sha256:{printable(cut(hint, 64))}"
    chain = material.x509_certificate_chain
    if chain is not None and chain.certificates:
        from cryptography import x509

        try:
            leaf = x509.load_der_x509_certificate(chain.certificates[0].raw_bytes)
        except ValueError:
            raise BadSignature("its signing certificate is not DER X.509") from None
        return f"certificate {printable(cut(certificate_name(leaf), 200))}"
    raise BadSignature(
        "it carries neither a public key hint nor a certificate chain (a Sigstore keyless "
        "signature needs the network to verify; use a key or a certificate)"
    )


def sign_model(
    model: Path,
    *,
    private_key: Path,
    algorithm: str = "sha256",
    certificate: Path | None = None,
    chain: Sequence[Path] = (),
    allow_symlinks: bool = False,
    ignored: str | None = None,
) -> bytes:
    """Sign ``model`` (a file, or a directory: every file beneath it but ``ignored``, a
    relative path, and git's files) with ``model-signing``'s own signing API and return the
    bundle's bytes. With ``certificate`` (and its ``chain`` of issuers, at least one), the
    bundle carries the chain; else it names the key. The package writes the bundle into a
    private temporary folder of ours, never beside the model: the caller writes it
    (``_atomic_file.write_atomically``). Blocking: hashes the model by path.

    Raises:
        InvalidConfig: a ``certificate`` without a ``chain``, or a key or certificate the
            package refuses; naming the option.
        Unsupported: the ``signing`` extra is not installed.
        OSError: a file cannot be read.
    """
    signing, hashing = _import("signing a model", "signing", "hashing")
    if algorithm not in SIGNED_ALGORITHMS:
        raise InvalidConfig(f"--hashing-algorithm: {algorithm!r} is not one of blake3, sha256")
    if certificate is not None and not chain:
        raise InvalidConfig(
            "--chain: signing with --certificate needs its issuers up to the root (the "
            "bundle carries them): add --chain ROOT.pem"
        )
    digests = hashing.Config().use_file_serialization(
        hashing_algorithm=algorithm, allow_symlinks=allow_symlinks
    )
    digests.set_ignored_paths(paths=[ignored] if ignored else [], ignore_git_paths=True)
    config = signing.Config().set_hashing_config(digests)
    try:
        if certificate is None:
            config.use_elliptic_key_signer(private_key=private_key)
        else:
            config.use_certificate_signer(
                private_key=private_key, signing_certificate=certificate, certificate_chain=chain
            )
    except (ValueError, TypeError) as error:
        option = "--private-key" if certificate is None else "--certificate/--chain"
        raise InvalidConfig(f"{option}: {cut(str(error))}") from None
    with tempfile.TemporaryDirectory(prefix="inferactors-sign-") as private:
        out = Path(private) / "model.sig"
        config.sign(model, out)
        return out.read_bytes()


def _read_bundle(data: bytes) -> Signature:
    (pb,) = _import("checking a signature", "_signing.sign_sigstore_pb")
    if len(data) > MAX_SIGNATURE_BYTES:
        raise BadSignature(f"larger than its limit of {MAX_SIGNATURE_BYTES >> 20} MiB")
    try:
        parse_json(data)  # depth, duplicate keys and huge integers, before the package reads it
        text = data.decode("utf-8")
        return cast("Signature", pb.Signature.read(cast(Path, _Contents(text))))
    except NotJson as error:
        raise BadSignature(f"not JSON: {error}") from None
    except InvalidConfig as error:  # depth, duplicate keys, huge integers
        raise BadSignature(f"refused JSON: {error}") from None
    except Exception as error:  # the package's parser: KeyError, pydantic errors, ...
        raise BadSignature(f"not a sigstore bundle: {_why(error)}") from None


def _by_key(signature: Signature, claimed: str, anchors: TrustAnchors) -> SignedFiles:
    (key_module,) = _import("checking a signature", "_signing.sign_ec_key")
    keys = [a for a in anchors if a.kind is AnchorKind.PUBLIC_KEY]
    matches = [a for a in keys if key_identity(a.pem) == claimed]
    if not matches:
        raise BadSignature(
            f"signed by {short_signer(claimed)}: none of the trust anchors "
            f"({anchors.described()}) holds that key"
        )
    make = partial(key_module.Verifier, _contents(matches[0].pem))
    verified = _verified(make, signature, matches[0], claimed)
    return attrs.evolve(verified, anchors=tuple(a.name for a in matches))


def _by_certificate(signature: Signature, claimed: str, anchors: TrustAnchors) -> SignedFiles:
    (cert_module,) = _import("checking a signature", "_signing.sign_certificate")
    chain = signature.bundle.verification_material.x509_certificate_chain
    if chain is not None and chain.certificates:  # claimed_signer found and parsed it
        problem = signing_certificate_problem(chain.certificates[0].raw_bytes)
        if problem is not None:
            raise BadSignature(f"signed by {claimed}: {problem}")
    roots = [a for a in anchors if a.kind is AnchorKind.CERTIFICATE]
    reasons = []
    found: list[SignedFiles] = []
    for anchor in roots:  # every root that verifies it: a requirement may name any of them
        try:
            make = partial(cert_module.Verifier, [_contents(anchor.pem)])
            found.append(_verified(make, signature, anchor, claimed))
        except BadSignature as error:
            reasons.append(f"{anchor.name}: {error}")
    if found:
        return attrs.evolve(found[0], anchors=tuple(f.anchor for f in found))
    if not roots:
        reasons.append(f"no certificate anchor ({anchors.described()})")
    raise BadSignature(
        f"signed by {claimed}, whose certificate chain leads to none of the trust anchors: "
        + "; ".join(reasons)
    )


_OUR_NAMES = {"blake2b": "blake2"}
"""Our name of a statement's ``hash_type`` (``model-signing`` is asked for ``blake2``,
hashes with BLAKE2b and writes ``blake2b`` in the statement)."""


def _verified(
    make: Callable[[], Any], signature: Signature, anchor: TrustAnchor, claimed: str
) -> SignedFiles:
    try:
        manifest = make().verify(signature)
    except Exception as error:  # cryptography's InvalidSignature, OpenSSL's chain errors, ...
        why = _why(error)
        raise BadSignature(f"signed by {short_signer(claimed)}: invalid ({why})") from None
    serialization = manifest.serialization_type
    if serialization.get("method") != "files":
        raise BadSignature(
            f"signs file shards (method {serialization.get('method')!r}), not whole files: "
            "sign it per file (model-signing's default)"
        )
    hash_type = str(serialization.get("hash_type"))
    algorithm = _OUR_NAMES.get(hash_type, hash_type)
    files: dict[str, str] = {}
    for descriptor in manifest.resource_descriptors():
        if descriptor.digest.algorithm != hash_type or algorithm not in SIGNED_ALGORITHMS:
            raise BadSignature(f"signs {descriptor.identifier} with {descriptor.digest.algorithm}")
        files[descriptor.identifier] = descriptor.digest.digest_hex
    return SignedFiles((anchor.name,), claimed, algorithm, files)


def short_signer(signer: str) -> str:
    """A key identity cut to 16 hex digits for messages (``key sha256:74e77a506e308a1f...``);
    a certificate's subject as it is."""
    return signer[:27] + "..." if signer.startswith("key sha256:") else signer


def _why(error: Exception) -> str:
    """The error's first three lines, joined (pydantic says what failed on the next two)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return cut("; ".join(lines[:3]) or type(error).__name__, 300)


def _import(what: str, *names: str) -> tuple[Any, ...]:
    import importlib

    try:
        return tuple(importlib.import_module(f"model_signing.{name}") for name in names)
    except ImportError:
        raise missing_extra(what) from None


@attrs.frozen
class _Contents:
    """Bytes or text we read ourselves, handed to ``model-signing`` where it reads a path
    (it calls only ``read_text`` and ``read_bytes``)."""

    text: str

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.text

    def read_bytes(self) -> bytes:
        return self.text.encode("utf-8")


def _contents(pem: bytes) -> Path:
    return cast(Path, _Contents(pem.decode("ascii", errors="replace")))
