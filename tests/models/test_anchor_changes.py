"""The trust anchors as a reload re-reads them, two anchors holding one key, a signature file
replaced or deleted, and who signed a model as its last check found it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from inferactors import ModelRegistry, PinMismatch
from inferactors._models.anchors import AnchorKind, TrustAnchors
from models.signing_support import KeyPair, key_anchors, make_key, oms_sign


def _signed(gguf_copy: Path, registry_path: Path, ops: KeyPair) -> ModelRegistry:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))
    registry.add(gguf_copy, name="tiny", signature=signature)
    return registry


def test_a_key_taken_out_of_its_anchor_is_refused_and_a_running_pin_says_so(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, stranger: KeyPair
) -> None:
    registry = _signed(gguf_copy, registry_path, ops)
    registry.require_signed("tiny", ["ops"])
    pinned = registry.pin(registry.get("tiny"))
    assert pinned.changed() is None
    assert registry.signer_seen("tiny") is not None
    assert registry.signer_seen("tiny").startswith("ops: key sha256:")  # type: ignore[union-attr]

    assert registry.use_anchors(key_anchors(ops=stranger.public))  # the file now holds another key
    assert not registry.use_anchors(key_anchors(ops=stranger.public))  # the same again: no change

    failure = pinned.changed()
    assert failure is not None
    assert failure.sticky
    assert "signed by key sha256:" in failure.reason
    assert "none of the trust anchors (ops) holds that key" in failure.reason
    assert "anchors expected: one of ops" in failure.reason
    assert registry.signer_seen("tiny") is None
    with pytest.raises(PinMismatch, match="none of the trust anchors"):
        registry.resolve("tiny")
    pinned.close()

    registry.use_anchors(key_anchors(ops=ops.public))  # put back
    registry.resolve("tiny")
    again = registry.pin(registry.get("tiny"))
    assert again.changed() is None
    again.close()


def test_an_anchor_added_beside_the_old_one_keeps_the_model_and_its_pin(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, stranger: KeyPair
) -> None:
    registry = _signed(gguf_copy, registry_path, ops)
    pinned = registry.pin(registry.get("tiny"))
    registry.use_anchors(key_anchors(ops=ops.public, corp=stranger.public))
    assert pinned.changed() is None
    pinned.close()
    assert registry.resolve("tiny", signed_by=["ops"]).signed_by is not None


def test_two_anchors_holding_one_key_both_vouch_for_what_it_signed(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, tmp_path: Path
) -> None:
    twin = tmp_path / "corp.pub"
    shutil.copy2(ops.public, twin)
    signature = oms_sign(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), ops.private)
    entries = [("corp", AnchorKind.PUBLIC_KEY, twin), ("ops", AnchorKind.PUBLIC_KEY, ops.public)]
    registry = ModelRegistry.open(registry_path, anchors=TrustAnchors.read(entries))
    registry.add(gguf_copy, name="tiny", signature=signature)

    for required in (["ops"], ["corp"]):
        resolved = registry.resolve("tiny", signed_by=required)
        assert resolved.signed_by is not None
        assert resolved.signed_by.startswith("corp, ops: key sha256:")
    registry.require_signed("tiny", ["ops"])
    registry.require_signed("tiny", ["corp"])
    registry.resolve("tiny")


def test_a_replaced_signature_names_the_signer_found_and_the_anchors_expected(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, stranger: KeyPair
) -> None:
    registry = _signed(gguf_copy, registry_path, ops)
    registry.require_signed("tiny", ["ops"])
    registry.resolve("tiny")
    oms_sign(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), stranger.private)

    with pytest.raises(PinMismatch) as caught:
        registry.resolve("tiny")
    why = caught.value.why
    assert why.startswith("signature tiny.gguf.sig: ")
    assert "signer found: signed by key sha256:" in why
    assert "none of the trust anchors (ops) holds that key" in why
    assert why.endswith("anchors expected: one of ops")


def test_a_deleted_signature_is_tampering_not_absence(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    registry = _signed(gguf_copy, registry_path, ops)
    registry.resolve("tiny")
    gguf_copy.with_name("tiny.gguf.sig").unlink()

    with pytest.raises(PinMismatch) as caught:  # PinMismatch: the instance is held down
        registry.resolve("tiny")
    assert caught.value.why == (
        f"signature tiny.gguf.sig: missing under {gguf_copy.parent}; signer found: none (no "
        "signature file there); anchors expected: any of ops"
    )
    assert caught.value.shard == "tiny.gguf.sig"


def test_the_signer_seen_follows_a_re_registration_at_the_next_check(
    gguf_copy: Path, registry_path: Path, ops: KeyPair, tmp_path: Path
) -> None:
    corp = make_key(tmp_path / "keys", "corp")
    registry = ModelRegistry.open(
        registry_path, anchors=key_anchors(ops=ops.public, corp=corp.public)
    )
    first = oms_sign(gguf_copy, gguf_copy.with_name("tiny.gguf.sig"), ops.private)
    registry.add(gguf_copy, name="tiny", signature=first)
    registry.pin(registry.get("tiny")).close()
    assert str(registry.signer_seen("tiny")).startswith("ops: ")

    second = oms_sign(gguf_copy, gguf_copy.with_name("corp.sig"), corp.private)
    registry.remove("tiny")
    registry.add(gguf_copy, name="tiny", signature=second)
    assert str(registry.signer_seen("tiny")).startswith("ops: ")  # not checked since
    registry.pin(registry.get("tiny")).close()  # the next spawn's pin
    assert str(registry.signer_seen("tiny")).startswith("corp: ")
