"""Tests of the registry's persisted cheap re-check (issue 11, item 5): a fresh registry
object on the same file (a restarted supervisor) trusts an unchanged recorded file without
hashing it, and hashes in full whenever the file or the record could have been tampered with.

Each "runtime" here is a new `ModelRegistry.open` on the same registry file with its own
counting hasher. ``racy_margin_s=0`` lets files written by the test be recorded at once
(the default margin's own test is ``test_a_file_changed_just_before_its_check_is_not_recorded``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from inferactors import ModelNotReady, PinMismatch
from inferactors._models.registry import ModelRegistry
from inferactors._models.verified_record import RECORD_SCHEMA, boot_id
from models.registry_support import CountingHasher, flip_byte


def runtime(registry_path: Path, hasher: CountingHasher) -> ModelRegistry:
    """A new registry object on the file, as a restarted supervisor opens it."""
    return ModelRegistry.open(registry_path, hasher=hasher, racy_margin_s=0.0)


def record_of(registry_path: Path) -> Path:
    return registry_path.with_name(registry_path.name + ".verified")


@pytest.fixture
def recorded(gguf_file: Path, registry_path: Path, hasher: CountingHasher) -> Path:
    """The tiny model registered and checked once by a first runtime (so recorded)."""
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
    return record_of(registry_path)


def test_a_second_runtime_does_not_rehash_an_unchanged_file(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    second = runtime(registry_path, hasher)
    with second.pin(second.get("tiny")) as pinned:
        assert os.path.samestat(os.fstat(pinned.shard_fds()[0]), gguf_file.stat())
    assert hasher.take() == []
    info = recorded.stat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o644, os.geteuid())
    (blob,) = json.loads(recorded.read_text())["blobs"]
    now = gguf_file.stat()
    assert (blob["inode"], blob["ctime_ns"]) == (now.st_ino, now.st_ctime_ns)


def test_a_byte_changed_in_place_with_mtime_restored_is_rehashed_and_refused(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    before = gguf_file.stat()
    flip_byte(gguf_file)
    os.utime(gguf_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert gguf_file.stat().st_mtime_ns == before.st_mtime_ns

    with pytest.raises(PinMismatch, match="BLAKE3 differs"):
        runtime(registry_path, hasher).resolve("tiny")

    assert hasher.take() == ["tiny.gguf"]
    assert json.loads(recorded.read_text())["blobs"] == []  # the entry was dropped


def test_a_file_replaced_by_rename_is_rehashed(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    copy = gguf_file.with_name("copy.tmp")
    shutil.copy2(gguf_file, copy)  # the same bytes and mtime, a new inode
    os.replace(copy, gguf_file)

    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == []  # the new inode is recorded now


def test_a_truncation_is_refused_and_a_regrown_file_rehashed(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    size = gguf_file.stat().st_size
    os.truncate(gguf_file, size - 1)
    with pytest.raises(PinMismatch, match="resized"):
        runtime(registry_path, hasher).resolve("tiny")
    os.truncate(gguf_file, size)  # the pinned size again, its last byte now zero

    with pytest.raises(PinMismatch, match="BLAKE3 differs"):
        runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]


def test_a_record_edited_to_claim_another_digest_is_not_trusted(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    data = json.loads(recorded.read_text())
    pinned = data["blobs"][0]["blake3"]
    data["blobs"][0]["blake3"] = "0" * 64
    recorded.write_text(json.dumps(data))

    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
    assert json.loads(recorded.read_text())["blobs"][0]["blake3"] == pinned  # rewritten


def test_a_record_written_at_another_boot_is_not_trusted(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    data = json.loads(recorded.read_text())
    assert data["boot"] == boot_id()
    data["boot"] = "another-boot"  # device numbers may have been handed out again since
    recorded.write_text(json.dumps(data))

    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
    assert json.loads(recorded.read_text())["boot"] == boot_id()  # rewritten for this boot


@pytest.mark.parametrize(
    "garbage",
    [b"{not json", b"\xff\xfe", b"[]", b'{"schema": "other", "blobs": []}', b"x" * (5 << 20)],
    ids=["syntax", "not-utf8", "not-an-object", "other-schema", "over-4MiB"],
)
def test_a_corrupt_record_is_ignored_and_rewritten(
    recorded: Path, registry_path: Path, hasher: CountingHasher, garbage: bytes
) -> None:
    recorded.write_bytes(garbage)

    runtime(registry_path, hasher).resolve("tiny")  # no error: the file is hashed

    assert hasher.take() == ["tiny.gguf"]
    data = json.loads(recorded.read_text())
    assert data["schema"] == RECORD_SCHEMA
    assert len(data["blobs"]) == 1


def test_one_malformed_entry_discredits_the_whole_record(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    data = json.loads(recorded.read_text())
    data["blobs"].append({**data["blobs"][0], "inode": True})  # a bool is not an inode
    recorded.write_text(json.dumps(data))
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]


def test_a_record_others_may_write_is_not_trusted(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    recorded.chmod(0o666)
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
    assert recorded.stat().st_mode & 0o777 == 0o644  # replaced by one of ours


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the record away")
def test_a_record_owned_by_another_user_is_not_trusted(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    os.chown(recorded, 65534, 65534)
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]


def test_a_link_in_place_of_the_record_is_not_followed(
    recorded: Path, registry_path: Path, hasher: CountingHasher, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "planted.json"
    os.replace(recorded, elsewhere)  # a valid record, reached only through a link
    recorded.symlink_to(elsewhere)

    runtime(registry_path, hasher).resolve("tiny")

    assert hasher.take() == ["tiny.gguf"]
    assert not recorded.is_symlink()  # replaced by a regular file, the target untouched
    assert json.loads(elsewhere.read_text())["schema"] == RECORD_SCHEMA


def test_verify_hashes_in_full_whatever_the_record_says(
    recorded: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    (check,) = runtime(registry_path, hasher).verify("tiny")
    assert check.ok
    assert hasher.take() == ["tiny.gguf"]


def test_a_file_changed_just_before_its_check_is_not_recorded(
    gguf_file: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    """A write within the same tick of the file system's clock as the check could leave
    ctime unchanged, so a file changed within the margin is hashed by every new runtime."""
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    for _ in range(2):
        ModelRegistry.open(registry_path, hasher=hasher, racy_margin_s=3600.0).resolve("tiny")
    assert hasher.take() == ["tiny.gguf", "tiny.gguf"]
    assert not record_of(registry_path).exists()


def test_an_unwritable_record_costs_a_hash_not_an_error(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    recorded.unlink()
    recorded.mkdir()  # neither readable as a record nor replaceable by a rename
    runtime(registry_path, hasher).resolve("tiny")
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf", "tiny.gguf"]


def test_a_missing_file_is_not_ready_and_leaves_the_record_alone(
    recorded: Path, registry_path: Path, hasher: CountingHasher, gguf_file: Path
) -> None:
    saved = recorded.read_bytes()
    gguf_file.rename(gguf_file.with_suffix(".away"))
    with pytest.raises(ModelNotReady, match="missing"):
        runtime(registry_path, hasher).resolve("tiny")
    gguf_file.with_suffix(".away").rename(gguf_file)  # a rename keeps the inode; ctime moves
    assert recorded.read_bytes() == saved
    runtime(registry_path, hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]
