"""Registering models with real OpenSSF Model Signing signatures (made by the
``model-signing`` package) and checking them at every pin: valid key, wrong key, a signed
manifest missing a shard, an extra file, a signature replayed onto another model,
certificate chains to an anchor and to a stranger."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from inferactors import InvalidConfig, ModelRegistry, PinMismatch
from inferactors._flavor import ModelFormat
from inferactors._models.anchors import key_identity
from models.registry_support import flip_byte
from models.signing_support import (
    KeyPair,
    certificate_anchors,
    key_anchors,
    make_certified_key,
    make_key,
    oms_sign,
    oms_sign_certificate,
)


def test_a_gguf_signed_by_the_tool_with_its_defaults_is_registered_with_its_signer(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    manifest = registry.add(gguf_copy, name="tiny", signature=signature)

    assert manifest.signature is not None
    assert manifest.signature.file.path == "tiny.gguf.sig"
    assert manifest.signature.algorithm == "sha256"
    assert manifest.signature.anchor == "ops"
    assert manifest.signature.signer == key_identity(ops.public.read_bytes())
    assert [f.path for f in manifest.shards] == ["tiny.gguf"]
    resolved = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public)).resolve(
        "tiny"
    )
    assert resolved.signed_by is not None
    assert resolved.signed_by.startswith("ops: key sha256:")


def test_an_mlx_folder_signed_with_blake3_pins_every_signed_file(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    (mlx_copy / "README.md").write_text("a model card, signed with the rest\n")
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private, algorithm="blake3")
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    manifest = registry.add(mlx_copy, name="tiny-mlx", signature=signature)

    assert manifest.format is ModelFormat.MLX
    assert [f.path for f in manifest.shards] == ["model.safetensors"]
    assert [f.path for f in manifest.tokenizer] == [
        "README.md",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert manifest.signature is not None
    assert manifest.signature.algorithm == "blake3"
    registry.resolve("tiny-mlx")


def test_a_signature_by_a_key_no_anchor_holds_is_refused_and_nothing_is_stored(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, stranger: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), stranger.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig) as caught:
        registry.add(gguf_copy, name="tiny", signature=signature)

    message = str(caught.value)
    short = key_identity(stranger.public.read_bytes())[:27]
    assert message.startswith("signature: model.sig: does not verify: signed by ")
    assert f"signed by {short}...: none of the trust anchors (ops) holds that key" in message
    assert not registry_path.exists()


def test_a_signed_manifest_missing_a_shard_is_refused(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    shard = mlx_copy / "model.safetensors"
    shutil.copy2(shard, mlx_copy / "model-00002-of-00002.safetensors")
    (mlx_copy / "model.safetensors").rename(mlx_copy / "model-00001-of-00002.safetensors")
    aside = mlx_copy.parent / "aside.safetensors"
    (mlx_copy / "model-00002-of-00002.safetensors").rename(aside)
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private)  # signs one shard
    aside.rename(mlx_copy / "model-00002-of-00002.safetensors")
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig, match=r"model-00002-of-00002\.safetensors is pinned but not"):
        registry.add(mlx_copy, name="tiny-mlx", signature=signature)
    assert registry.list() == ()


def test_an_extra_weight_file_added_after_signing_is_refused(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private)
    (mlx_copy / "adapters.safetensors").write_bytes(b"\x08" + bytes(7) + b"{}")
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(
        InvalidConfig,
        match=r"signature: model.sig: adapters.safetensors is pinned but not signed by it",
    ):
        registry.add(mlx_copy, name="tiny-mlx", signature=signature)


def test_a_signed_file_missing_from_the_folder_is_refused(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    (mlx_copy / "notes.md").write_text("signed, then deleted\n")
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private)
    (mlx_copy / "notes.md").unlink()
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig, match=r"path: notes.md is missing from"):
        registry.add(mlx_copy, name="tiny-mlx", signature=signature)


def test_a_signature_replayed_onto_another_model_is_refused(
    gguf_copy: Path, mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    other = gguf_copy.with_name("other.gguf")
    shutil.copy2(gguf_copy, other)
    flip_byte(other, offset=100_000)
    replayed = Path(shutil.copy2(signature, other.with_name("other.gguf.sig")))
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    with pytest.raises(InvalidConfig, match=r"other.gguf: its sha256 digest differs from the sig"):
        registry.add(other, name="other", signature=replayed)

    folder_signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private)
    other_folder = Path(shutil.copytree(mlx_copy, mlx_copy.parent / "other"))
    (other_folder / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(InvalidConfig, match=r"config.json: its sha256 digest differs"):
        registry.add(other_folder, name="other-mlx", signature=other_folder / "model.sig")
    assert folder_signature.exists()  # the original still verifies in its own folder
    registry.add(mlx_copy, name="tiny-mlx", signature=folder_signature)


def test_a_certificate_chain_to_an_anchor_verifies_and_one_to_a_stranger_does_not(
    gguf_copy: Path, tmp_path: Path, registry_path: Path
) -> None:
    ours = make_certified_key(tmp_path / "pki", "ops@example.org", root_name="our-root")
    theirs = make_certified_key(tmp_path / "other-pki", "ops@example.org", root_name="their-root")
    anchors = certificate_anchors(corp=ours.root)
    registry = ModelRegistry.open(registry_path, anchors=anchors)

    good = oms_sign_certificate(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), ours)
    manifest = registry.add(gguf_copy, name="tiny", signature=good)
    assert manifest.signature is not None
    assert manifest.signature.signer == "certificate CN=ops@example.org"
    assert manifest.signature.anchor == "corp"

    bad = oms_sign_certificate(gguf_copy, gguf_copy.with_name("model.sig"), theirs)
    with pytest.raises(InvalidConfig) as caught:
        registry.add(gguf_copy, name="tiny-2", signature=bad)
    assert "signed by certificate CN=ops@example.org, whose certificate chain leads to none" in (
        str(caught.value)
    )
    assert "corp: signed by certificate CN=ops@example.org: invalid (" in str(caught.value)
    assert [m.name for m in registry.list()] == ["tiny"]


def test_a_signed_model_checked_without_its_anchor_is_held_as_tampered(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, stranger: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public)).add(
        gguf_copy, name="tiny", signature=signature
    )

    rotated = ModelRegistry.open(registry_path, anchors=key_anchors(ops=stranger.public))
    with pytest.raises(PinMismatch) as caught:
        rotated.resolve("tiny")
    assert caught.value.shard == "model.sig"
    assert "signature model.sig: does not verify: signed by key sha256:" in caught.value.why
    assert "none of the trust anchors (ops) holds that key" in caught.value.why

    unconfigured = ModelRegistry.open(registry_path)
    with pytest.raises(PinMismatch, match="no trust anchor is configured to verify it"):
        unconfigured.resolve("tiny")


def test_a_replaced_signature_file_is_a_changed_pin(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))
    registry.add(gguf_copy, name="tiny", signature=signature)
    registry.resolve("tiny")

    oms_sign(gguf_copy, signature, ops.private, algorithm="blake3")  # valid, but not the pin

    with pytest.raises(PinMismatch, match=r"signature model\.sig: BLAKE3 differs"):
        registry.resolve("tiny")


def test_a_second_signer_key_is_a_second_anchor(
    gguf_copy: Path, tmp_path: Path, registry_path: Path, ops: KeyPair
) -> None:
    backup = make_key(tmp_path / "keys", "backup")
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), backup.private)
    anchors = key_anchors(ops=ops.public, backup=backup.public)

    manifest = ModelRegistry.open(registry_path, anchors=anchors).add(
        gguf_copy, name="tiny", signature=signature
    )

    assert manifest.signature is not None
    assert manifest.signature.anchor == "backup"


def test_an_mlx_folder_signed_with_blake2_verifies_and_a_changed_byte_is_caught(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private, algorithm="blake2")
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))

    manifest = registry.add(mlx_copy, name="tiny-mlx", signature=signature)

    assert manifest.signature is not None
    assert manifest.signature.algorithm == "blake2"
    (check,) = registry.verify("tiny-mlx")
    assert check.ok, check.reason
    flip_byte(mlx_copy / "config.json")
    (check,) = registry.verify("tiny-mlx")
    assert not check.ok
