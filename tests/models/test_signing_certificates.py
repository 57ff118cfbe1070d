"""What a signing certificate must be besides chaining to an anchor: a TLS server
certificate (extended key usage serverAuth only) and a certificate not yet valid are
refused; an expired one verifies, as ``model-signing``'s own verifier has it (the chain is
checked at the certificate's start of validity); a subject-less certificate is named by
its alternative names."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import model_signing
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from inferactors import InvalidConfig, ModelRegistry
from inferactors._models.signing_certificate import certificate_name
from models.signing_support import certificate_anchors, make_certified_key, oms_sign_certificate

DAY = datetime.timedelta(days=1)


@pytest.fixture
def gguf(tmp_path: Path, tiny_gguf: Path) -> Path:
    return Path(shutil.copy2(tiny_gguf, tmp_path / "tiny.gguf"))


def _add(gguf: Path, tmp_path: Path, **options: object) -> ModelRegistry:
    signer = make_certified_key(tmp_path / "pki", "ops", root_name="root", **options)  # type: ignore[arg-type]
    signature = oms_sign_certificate(gguf, Path(f"{gguf}.sig"), signer)
    registry = ModelRegistry.open(
        tmp_path / "models.json", anchors=certificate_anchors(corp=signer.root)
    )
    registry.add(gguf, name="tiny", signature=signature)
    return registry


def test_a_tls_server_certificate_is_refused_and_a_code_signing_one_taken(
    gguf: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidConfig) as caught:
        _add(gguf, tmp_path / "tls", purposes=[ExtendedKeyUsageOID.SERVER_AUTH])
    assert (
        "signed by certificate CN=ops: its certificate is for serverAuth only (extended key "
        "usage), not code signing" in str(caught.value)
    )

    registry = _add(
        gguf,
        tmp_path / "code",
        purposes=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CODE_SIGNING],
    )
    assert [m.name for m in registry.list()] == ["tiny"]


def test_a_certificate_not_yet_valid_is_refused(gguf: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig) as caught:
        _add(gguf, tmp_path, starts_in=400 * DAY)
    assert "signed by certificate CN=ops: its certificate is not valid until " in str(caught.value)
    assert not (tmp_path / "models.json").exists()


def test_an_expired_certificate_verifies_as_model_signing_verifies_it(
    gguf: Path, tmp_path: Path
) -> None:
    registry = _add(gguf, tmp_path, starts_in=-400 * DAY)  # valid 401 to 370 days ago

    assert [m.name for m in registry.list()] == ["tiny"]
    config = model_signing.verifying.Config()  # type: ignore[no-untyped-call]
    config.use_certificate_verifier(certificate_chain=[tmp_path / "pki" / "root.pem"])
    hashing = model_signing.hashing.Config()  # type: ignore[no-untyped-call]
    config.set_hashing_config(hashing.use_file_serialization(hashing_algorithm="sha256"))
    config.verify(gguf, Path(f"{gguf}.sig"))  # the package's own verdict: the same


def test_a_certificate_without_a_subject_is_named_by_its_alternative_names() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "root")]))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - DAY)
        .not_valid_after(now + DAY)
        .add_extension(
            x509.SubjectAlternativeName([x509.RFC822Name("ops@example.org")]), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    assert certificate_name(certificate) == "SAN rfc822:ops@example.org"
