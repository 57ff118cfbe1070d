"""When a registered signature is verified again, what a forged registry entry meets, and the
"signed by one of these anchors" requirement."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import attrs
import blake3
import pytest

from inferactors import InvalidConfig, ModelRegistry, PinMismatch
from inferactors._models import oms, signature_check
from inferactors._models.oms import SignedFiles
from models.registry_support import flip_byte
from models.signing_support import KeyPair, key_anchors, make_key, oms_sign


@attrs.define
class Verifications:
    """Counts the signature verifications the registry runs (the real ones, passed on)."""

    count: int = 0

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> Verifications:
    seen = Verifications()
    real = oms.verify_signature

    def counting(data: bytes, anchors: object) -> SignedFiles:
        seen.count += 1
        return real(data, anchors)  # type: ignore[arg-type]  # passed through

    monkeypatch.setattr(signature_check, "verify_signature", counting)
    return seen


def _touch(path: Path) -> None:
    """Rewrite the same bytes: the stamp (ctime, mtime) changes, the content does not."""
    path.write_bytes(path.read_bytes())


@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
def test_the_signature_is_verified_again_exactly_when_a_file_is_hashed_in_full(
    mlx_copy: Path,
    registry_path: Path,
    ops: KeyPair,
    verifications: Verifications,
    algorithm: str,
) -> None:
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private, algorithm=algorithm)
    anchors = key_anchors(ops=ops.public)
    ModelRegistry.open(registry_path, anchors=anchors).add(
        mlx_copy, name="tiny", signature=signature
    )
    verifications.take()
    registry = ModelRegistry.open(registry_path, anchors=anchors)

    registry.resolve("tiny")
    assert verifications.take() == 1  # the first check in this registry object
    registry.resolve("tiny")
    registry.pin(registry.get("tiny")).close()
    assert verifications.take() == 0  # every stamp as verified: the last verification holds

    _touch(mlx_copy / "tokenizer.json")
    registry.resolve("tiny")
    assert verifications.take() == 1  # hashed in full, so verified again

    assert registry.verify("tiny")[0].ok
    assert verifications.take() == 1


def test_a_changed_byte_of_a_sha256_signed_model_is_refused_and_named(
    mlx_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(mlx_copy, mlx_copy / "model.sig", ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))
    registry.add(mlx_copy, name="tiny", signature=signature)
    registry.resolve("tiny")

    flip_byte(mlx_copy / "model.safetensors", offset=5000)

    with pytest.raises(PinMismatch) as caught:
        registry.resolve("tiny")
    assert caught.value.shard == "model.safetensors"


def _forged_entry(registry_path: Path, model: Path, signature: Path, entry: str) -> None:
    """Rewrite ``entry`` as someone who can write the registry file but holds no key would:
    pins computed for ``model``'s bytes, the genuine signature of another model kept."""
    document = json.loads(registry_path.read_text())
    (forged,) = [m for m in document["models"] if m["name"] == entry]
    data = model.read_bytes()
    forged["root"] = str(model.parent)
    forged["shards"] = [
        {"path": model.name, "size": len(data), "blake3": blake3.blake3(data).hexdigest()}
    ]
    sig = signature.read_bytes()
    forged["signature"]["path"] = signature.name
    forged["signature"]["size"] = len(sig)
    forged["signature"]["blake3"] = blake3.blake3(sig).hexdigest()
    registry_path.write_text(json.dumps(document))


def test_a_registry_entry_rewritten_onto_other_bytes_fails_on_the_signed_digests(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    anchors = key_anchors(ops=ops.public)
    ModelRegistry.open(registry_path, anchors=anchors).add(
        gguf_copy, name="tiny", signature=signature
    )
    evil = gguf_copy.with_name("evil.gguf")
    shutil.copy2(gguf_copy, evil)
    flip_byte(evil, offset=200_000)

    _forged_entry(registry_path, evil, signature, "tiny")

    with pytest.raises(PinMismatch) as caught:
        ModelRegistry.open(registry_path, anchors=anchors).resolve("tiny")
    assert caught.value.why.startswith(
        "signature model.sig: evil.gguf: its sha256 digest differs from the signed one "
        "(signed by ops: key sha256:"
    )


def test_signed_by_refuses_an_unsigned_model_and_one_signed_by_another_anchor(
    gguf_copy: Path, tmp_path: Path, registry_path: Path, ops: KeyPair
) -> None:
    corp = make_key(tmp_path / "keys", "corp")
    anchors = key_anchors(ops=ops.public, corp=corp.public)
    registry = ModelRegistry.open(registry_path, anchors=anchors)
    registry.add(gguf_copy, name="plain")
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), corp.private)
    registry.add(gguf_copy, name="by-corp", signature=signature)

    with pytest.raises(PinMismatch) as unsigned:
        registry.resolve("plain", signed_by=["ops"])
    assert unsigned.value.why == (
        "not signed by any of the trust anchors ops: unsigned (no signature registered)"
    )
    with pytest.raises(PinMismatch) as other:
        registry.resolve("by-corp", signed_by=["ops"])
    assert other.value.why.startswith(
        "not signed by any of the trust anchors ops: signed by corp: key sha256:"
    )
    assert registry.resolve("by-corp", signed_by=["corp", "ops"]).signed_by is not None
    assert registry.resolve("by-corp").signed_by is not None  # a check records nothing
    with pytest.raises(InvalidConfig, match="signed_by\\[0\\]: no trust anchor named 'nobody'"):
        registry.resolve("plain", signed_by=["nobody"])


def test_a_requirement_stated_at_load_holds_when_the_entry_is_swapped_later(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    """The spawn's check (`ModelRegistry.pin`) refuses an entry re-registered unsigned."""
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))
    registry.add(gguf_copy, name="tiny", signature=signature)
    registry.resolve("tiny", signed_by=["ops"])
    registry.require_signed("tiny", ["ops"])  # as a load does once admitted

    other = ModelRegistry.open(registry_path)  # another process, no anchors, same file
    other.remove("tiny")
    other.add(gguf_copy, name="tiny")

    with pytest.raises(PinMismatch, match="unsigned \\(no signature registered\\)"):
        registry.pin(registry.get("tiny"))


def test_a_sticky_signature_refusal_is_lifted_by_a_full_check_that_passes(
    gguf_copy: Path, registry_path: Path, ops: KeyPair
) -> None:
    signature = oms_sign(gguf_copy, gguf_copy.with_name("model.sig"), ops.private)
    registry = ModelRegistry.open(registry_path, anchors=key_anchors(ops=ops.public))
    registry.add(gguf_copy, name="tiny", signature=signature)
    good = signature.read_bytes()
    signature.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])

    with pytest.raises(PinMismatch, match=r"signature model\.sig: BLAKE3 differs"):
        registry.resolve("tiny")
    signature.write_bytes(good)
    os.utime(signature)

    (check,) = registry.verify("tiny")
    assert check.ok, check.reason
