"""Tests of the registry's verification checks on resolve and verify: a full check first,
then lazy ones hashing only what changed, refusals that stay until a full check passes,
missing, resized and relocated files, unknown names, and concurrent first checks.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import attrs
import pytest

from inferactors import ModelFormat, ModelNotReady, UnknownModel
from inferactors._models.hashing import ProgressFn
from inferactors._models.registry import ModelCheck, ModelRegistry
from models.registry_support import GGUF_BYTES, CountingHasher, flip_byte, safetensors_bytes


def test_first_resolve_hashes_everything_then_only_what_changed(
    hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    hasher.take()

    resolved = registry.resolve("hf")
    assert len(hasher.take()) == 5
    assert resolved.root == hf_dir.resolve()
    assert resolved.shards[0] == hf_dir / "model-00001-of-00002.safetensors"
    assert resolved.tokenizer[1] == hf_dir / "config.json"

    registry.resolve("hf")
    assert hasher.take() == []

    config = hf_dir / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    registry.resolve("hf")
    assert hasher.take() == ["config.json"]
    registry.resolve("hf")
    assert hasher.take() == []


def test_each_registry_object_starts_with_a_full_check_of_unrecorded_files(
    gguf_file: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    """Files changed within the racy margin are never recorded (``test_verified_record``
    covers files that are)."""
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    first = ModelRegistry.open(registry_path, hasher=hasher, racy_margin_s=3600.0)
    first.resolve("tiny")
    first.resolve("tiny")
    ModelRegistry.open(registry_path, hasher=hasher, racy_margin_s=3600.0).resolve("tiny")
    assert hasher.take() == ["tiny.gguf", "tiny.gguf"]


def test_the_recorded_stamps_survive_the_registry_file_changing_on_disk(
    gguf_file: Path, hf_dir: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    """Another process adding a model makes the registry re-read its file; the manifest
    read again is the same, so its spawn check stays the cheap one (issue 8, item 4)."""
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    registry = ModelRegistry.open(registry_path, hasher=hasher)
    registry.resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]

    ModelRegistry.open(registry_path).add(hf_dir, name="hf")  # another process's change
    registry.pin(registry.get("tiny")).close()

    assert [m.name for m in registry.list()] == ["hf", "tiny"]  # the file was read again
    assert hasher.take() == []


TAMPERED = "model tiny is not ready: shard tiny.gguf: BLAKE3 differs from the registry"


def test_full_check_catches_a_flipped_byte_of_the_same_size(
    gguf_file: Path, registry_path: Path
) -> None:
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    stat = gguf_file.stat()
    flip_byte(gguf_file)
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime looks untouched
    assert gguf_file.stat().st_size == stat.st_size

    with pytest.raises(ModelNotReady) as caught:
        ModelRegistry.open(registry_path).resolve("tiny")

    assert str(caught.value) == f"{TAMPERED} (tampered or replaced)"


def test_lazy_check_catches_a_touched_tampered_file(
    gguf_file: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    registry.resolve("tiny")
    flip_byte(gguf_file)
    os.utime(gguf_file, ns=(0, gguf_file.stat().st_mtime_ns + 10**9))
    hasher.take()

    with pytest.raises(ModelNotReady, match=f"^{re.escape(TAMPERED)}"):
        registry.resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]


def test_lazy_check_sees_through_a_restored_mtime(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    registry.resolve("tiny")
    stat = gguf_file.stat()
    flip_byte(gguf_file)
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ctime still moves
    with pytest.raises(ModelNotReady, match=f"^{re.escape(TAMPERED)}"):
        registry.resolve("tiny")


def test_a_refusal_is_sticky_until_a_full_check_passes(
    hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    registry.resolve("hf")
    shard = hf_dir / "model-00002-of-00002.safetensors"
    original = shard.read_bytes()
    flip_byte(shard)
    with pytest.raises(ModelNotReady, match=r"shard model-00002-of-00002\.safetensors: BLAKE3"):
        registry.resolve("hf")
    with pytest.raises(ModelNotReady, match=r"shard model-00002-of-00002\.safetensors: BLAKE3"):
        registry.resolve("hf")
    shard.write_bytes(original)
    hasher.take()

    registry.resolve("hf")  # refused: a full check, every file
    assert len(hasher.take()) == 5
    registry.resolve("hf")  # passed: lazy again
    assert hasher.take() == []


def test_missing_file_is_not_ready_but_not_sticky(hf_dir: Path, hasher: CountingHasher) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    registry.resolve("hf")
    config = hf_dir / "config.json"
    moved = hf_dir / "config.moved"
    config.rename(moved)

    with pytest.raises(
        ModelNotReady, match=r"^model hf is not ready: tokenizer file config\.json: missing under"
    ):
        registry.resolve("hf")
    moved.rename(config)
    hasher.take()
    registry.resolve("hf")
    assert hasher.take() == ["config.json"]  # lazy: only the file that went away


def test_missing_root_is_not_ready(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    gguf_file.unlink()
    gguf_file.parent.rmdir()
    with pytest.raises(ModelNotReady, match=r"^model tiny is not ready: root .* is missing"):
        registry.resolve("tiny")


def test_resized_file_is_refused_without_hashing(gguf_file: Path, hasher: CountingHasher) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    with gguf_file.open("ab") as handle:
        handle.write(b"!")
    hasher.take()

    with pytest.raises(ModelNotReady) as caught:
        registry.resolve("tiny")

    size = len(GGUF_BYTES)
    assert str(caught.value) == (
        f"model tiny is not ready: shard tiny.gguf: size is {size + 1} bytes, "
        f"the registry pins {size} (resized)"
    )
    assert hasher.take() == []


def test_a_symlink_leading_outside_the_root_is_refused(hf_dir: Path, tmp_path: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(hf_dir, name="hf")
    shard = hf_dir / "model-00001-of-00002.safetensors"
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(shard.read_bytes())  # same content: only the location is wrong
    shard.unlink()
    shard.symlink_to(outside)

    with pytest.raises(ModelNotReady, match=r"shard model-00001-of-00002\.safetensors: resolves"):
        registry.resolve("hf")


def test_hugging_face_cache_links_into_blobs_are_inside(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--me--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "aa11").write_bytes(safetensors_bytes({"format": "mlx"}) + b"w")
    (repo / "blobs" / "bb22").write_text("{}")
    (snapshot / "model.safetensors").symlink_to("../../blobs/aa11")
    (snapshot / "config.json").symlink_to("../../blobs/bb22")
    registry = ModelRegistry.in_memory()

    manifest = registry.add(snapshot, name="tiny-mlx")
    resolved = registry.resolve("tiny-mlx")

    assert manifest.format is ModelFormat.MLX
    assert resolved.shards == (snapshot / "model.safetensors",)


def test_unknown_models_are_refused(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    for call in (registry.get, registry.resolve, registry.verify, registry.remove):
        with pytest.raises(UnknownModel, match=r"^no registered model 'other'$"):
            call("other")


def test_verify_reports_each_model_and_clears_a_refusal(
    gguf_file: Path, hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    registry.add(hf_dir, name="hf")
    registry.add_ollama("qwen", "qwen3:0.6b")
    flip_byte(gguf_file)

    checks = registry.verify()

    assert checks == [
        ModelCheck("hf", True, "5 files verified"),
        ModelCheck("qwen", True, "ollama tag qwen3:0.6b: no files pinned (Ollama keeps them)"),
        ModelCheck(
            "tiny",
            False,
            "shard tiny.gguf: BLAKE3 differs from the registry (tampered or replaced)",
        ),
    ]
    flip_byte(gguf_file)
    assert registry.verify("tiny") == [ModelCheck("tiny", True, "1 file verified")]
    hasher.take()
    registry.resolve("tiny")
    assert hasher.take() == []  # verify's full check counts: resolve is lazy


def test_concurrent_first_resolves_hash_each_file_once(hf_dir: Path) -> None:
    @attrs.define
    class SlowHasher(CountingHasher):
        def hash_fd(self, fd: int, *, path: Path, on_progress: ProgressFn | None = None) -> str:
            time.sleep(0.01)  # widen the window in which two checks could overlap
            return super().hash_fd(fd, path=path, on_progress=on_progress)

    hasher = SlowHasher()
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    hasher.take()
    threads = [threading.Thread(target=registry.resolve, args=("hf",)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(hasher.take()) == 5  # one full check; the others waited, then found no change
