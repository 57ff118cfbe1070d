"""Bad signature files and bad trust anchor files are refused clearly, naming the field, and
nothing is stored; without the signing extra the refusal says how to install it."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from inferactors import InvalidConfig, ModelRegistry, Unsupported
from inferactors._models.anchors import AnchorKind, TrustAnchors
from models.signing_support import KeyPair, key_anchors, make_certified_key, make_key, oms_sign


def _not_json(sig: Path) -> None:
    sig.write_text("this is not a bundle")


def _deep(sig: Path) -> None:
    sig.write_text("[" * 5000 + "]" * 5000)


def _duplicate_keys(sig: Path) -> None:
    sig.write_text('{"mediaType": "a", "mediaType": "b"}')


def _empty_object(sig: Path) -> None:
    sig.write_text("{}")


def _huge(sig: Path) -> None:
    sig.write_bytes(b" " * (4 << 20) + b"{}")


def _no_key_hint(sig: Path) -> None:
    bundle = json.loads(sig.read_text())
    del bundle["verificationMaterial"]["publicKey"]["hint"]
    sig.write_text(json.dumps(bundle))


def _keyless(sig: Path) -> None:
    """As Sigstore's keyless signing makes it: one short-lived certificate, no chain."""
    bundle = json.loads(sig.read_text())
    leaf = make_certified_key(sig.parent / "pki", "someone@example.org", root_name="fulcio")
    der = x509.load_pem_x509_certificate(leaf.certificate.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    certificate = {"rawBytes": base64.b64encode(der).decode()}
    bundle["verificationMaterial"] = {"certificate": certificate, "tlogEntries": []}
    sig.write_text(json.dumps(bundle))


def _payload_edited(sig: Path) -> None:
    bundle = json.loads(sig.read_text())
    payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    payload["predicate"]["resources"][0]["digest"] = "0" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    sig.write_text(json.dumps(bundle))


def _wrong_media_type(sig: Path) -> None:
    bundle = json.loads(sig.read_text())
    bundle["mediaType"] = "application/vnd.example+json"
    sig.write_text(json.dumps(bundle))


def _fifo(sig: Path) -> None:
    sig.unlink()
    os.mkfifo(sig)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (_not_json, "signature: model.sig: does not verify: not JSON: "),
        (_deep, "signature: model.sig: does not verify: refused JSON: JSON nested deeper than"),
        (_duplicate_keys, 'does not verify: refused JSON: $: the object has the key "mediaType" '),
        (_empty_object, "signature: model.sig: does not verify: not a sigstore bundle: "),
        (_huge, "signature: model.sig: "),
        (_no_key_hint, "does not verify: the bundle names no public key (no publicKey.hint)"),
        (_keyless, "does not verify: it carries neither a public key hint nor a certificate"),
        (_payload_edited, "does not verify: signed by key sha256:"),
        (_wrong_media_type, "not a sigstore bundle: 1 validation error for Bundle; mediaType; "),
        (_fifo, "signature: model.sig: "),
    ],
)
def test_a_bad_signature_file_is_refused_and_nothing_is_stored(
    gguf_copy: Path,
    registry_path: Path,
    ops: KeyPair,
    spoil: Callable[[Path], None],
    message: str,
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    spoil(signature)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig) as caught:
        registry.add(gguf_copy, name="tiny", signature=signature)

    assert message in str(caught.value)
    assert len(str(caught.value)) < 1200
    assert not registry_path.exists()


def test_a_signature_outside_the_model_folder_is_refused(
    gguf_copy: Path, tmp_path: Path, registry_path: Path, ops: KeyPair
) -> None:
    outside = oms_sign(gguf_copy, tmp_path / "elsewhere.sig", ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig, match="is not in the model's folder"):
        registry.add(gguf_copy, name="tiny", signature=outside)


def test_a_signature_with_no_anchor_configured_is_refused(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)

    with pytest.raises(InvalidConfig, match="no trust anchor to verify it against"):
        ModelRegistry.open(registry_path).add(gguf_copy, name="tiny", signature=signature)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bad_trust_anchor_files_are_refused_naming_the_entry(tmp_path: Path) -> None:
    ops = make_key(tmp_path, "ops")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    rsa_pem = rsa_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    ed_curve = ec.generate_private_key(ec.SECP256K1()).public_key()
    k1_pem = ed_curve.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    key = AnchorKind.PUBLIC_KEY
    cases: list[tuple[list[tuple[str, AnchorKind, Path]], str]] = [
        ([("ops", key, tmp_path / "missing.pub")], "trust_anchors[0].public_key: cannot read"),
        ([("ops", key, _write(tmp_path / "junk.pub", b"junk"))], "not a PEM public key"),
        ([("ops", key, _write(tmp_path / "rsa.pub", rsa_pem))], "not an elliptic-curve P-256"),
        ([("ops", key, _write(tmp_path / "k1.pub", k1_pem))], "not an elliptic-curve P-256"),
        (
            [("ca", AnchorKind.CERTIFICATE, ops.public)],
            "trust_anchors[0].certificate: " + str(ops.public) + ": holds no PEM certificate",
        ),
        ([("ops", key, ops.public), ("ops", key, ops.public)], "trust_anchors[1].name: 'ops'"),
        ([("no spaces", key, ops.public)], "trust_anchors[0].name: 'no spaces' is not a trust"),
        (
            [("ops", key, _write(tmp_path / "big.pub", b"x" * (300 * 1024)))],
            "larger than its limit",
        ),
        ([("ops", key, tmp_path)], "trust_anchors[0].public_key: "),
    ]
    for entries, message in cases:
        with pytest.raises(InvalidConfig) as caught:
            TrustAnchors.read(entries)
        assert message in str(caught.value), (entries, str(caught.value))


def test_without_the_signing_extra_the_refusal_names_it(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    anchors = key_anchors(ops=ops.public)
    for name in [m for m in sys.modules if m == "model_signing" or m.startswith("model_signing.")]:
        monkeypatch.setitem(sys.modules, name, None)

    with pytest.raises(Unsupported) as caught:
        ModelRegistry.open(registry_path, anchors=anchors).add(
            gguf_copy, name="tiny", signature=signature
        )
    assert (
        "needs the signing extra (OpenSSF Model Signing): pip install -e '.[signing]' in the"
        in (str(caught.value))
    )

    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(
        Unsupported, match=r"pip install -e '\.\[signing\]' in the inferactors clone"
    ):
        key_anchors(ops=ops.public)
    assert not registry_path.exists()


def test_a_p384_key_is_an_anchor_too(gguf_copy: Path, tmp_path: Path, registry_path: Path) -> None:
    big = make_key(tmp_path / "keys", "big", ec.SECP384R1())
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), big.private)

    manifest = ModelRegistry.open(registry_path, anchors=key_anchors(big=big.public)).add(
        gguf_copy, name="tiny", signature=signature
    )
    assert manifest.signature is not None
