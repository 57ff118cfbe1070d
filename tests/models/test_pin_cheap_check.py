"""Tests of the pin check a spawn runs (issue 8, item 4): `ModelRegistry.pin` opens each
pinned file beneath the model root and checks the open descriptor. A file whose stamp
(size, mtime_ns, ctime_ns, inode, device) equals the one recorded at its last full hash is
not re-hashed; any difference re-hashes it in full, from the descriptor; tampering (bytes
flipped, appended, truncated, the file replaced, a link out of the root) is `PinMismatch`
naming the file, and absence is only `ModelNotReady`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs
import pytest

from inferactors import ModelNotReady, PinMismatch
from inferactors._models.hashing import Blake3Hasher, FileStamp
from inferactors._models.pinning import ModelTree, check_file
from inferactors._models.registry import ModelRegistry
from models.registry_support import GGUF_BYTES, CountingHasher, flip_byte

STAMP_FIELDS = ("size", "mtime_ns", "ctime_ns", "inode", "device")


@pytest.fixture
def registry(gguf_file: Path, hasher: CountingHasher) -> ModelRegistry:
    """A registry holding ``gguf_file`` as ``tiny``, fully checked once (stamps recorded)."""
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    registry.resolve("tiny")
    hasher.take()
    return registry


def pin_and_close(registry: ModelRegistry) -> None:
    registry.pin(registry.get("tiny")).close()


def test_pin_hands_back_open_descriptors_of_the_verified_files(
    registry: ModelRegistry, gguf_file: Path
) -> None:
    with registry.pin(registry.get("tiny")) as pinned:
        (fd,) = pinned.shard_fds()
        assert pinned.root_fd is not None
        assert os.fstat(fd).st_ino == gguf_file.stat().st_ino
        assert os.fstat(pinned.root_fd).st_ino == gguf_file.parent.stat().st_ino
        assert os.pread(fd, len(GGUF_BYTES), 0) == GGUF_BYTES
        assert not os.get_inheritable(fd)  # only a spawn's pass_fds hands it on
    assert pinned.fds == {}
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)


def test_an_unchanged_file_is_only_stat_checked(
    registry: ModelRegistry, hasher: CountingHasher
) -> None:
    for _ in range(3):
        pin_and_close(registry)
    assert hasher.take() == []


@pytest.mark.parametrize("field", STAMP_FIELDS)
def test_any_stamp_field_that_differs_forces_a_full_rehash(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher, field: str
) -> None:
    tree = ModelTree.at_root(gguf_file.parent)
    try:
        (file,) = registry.get("tiny").shards
        known = FileStamp.of(gguf_file.stat())
        fd, _stamp = check_file(tree, "shard", file, known=known, hasher=hasher)  # type: ignore[misc]
        os.close(fd)
        assert hasher.take() == []
        other = attrs.evolve(known, **{field: getattr(known, field) + 1})
        fd, stamp = check_file(tree, "shard", file, known=other, hasher=hasher)  # type: ignore[misc]
        os.close(fd)
    finally:
        tree.close()
    assert hasher.take() == ["tiny.gguf"]
    assert stamp == known


def test_a_touched_file_is_rehashed_once_then_stat_checked_again(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher
) -> None:
    info = gguf_file.stat()
    os.utime(gguf_file, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    pin_and_close(registry)
    assert hasher.take() == ["tiny.gguf"]
    pin_and_close(registry)
    assert hasher.take() == []


def test_a_mode_change_moves_only_ctime_and_still_rehashes(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher
) -> None:
    before = gguf_file.stat()
    gguf_file.chmod(0o600)
    gguf_file.chmod(0o644)
    after = gguf_file.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    pin_and_close(registry)
    assert hasher.take() == ["tiny.gguf"]


def test_an_identical_copy_put_in_place_is_a_new_inode_rehashed_and_served(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher
) -> None:
    copy = gguf_file.with_name("copy.tmp")
    shutil.copy2(gguf_file, copy)
    copy.replace(gguf_file)
    with registry.pin(registry.get("tiny")) as pinned:
        assert os.fstat(pinned.shard_fds()[0]).st_ino == gguf_file.stat().st_ino
    assert hasher.take() == ["tiny.gguf"]


def flip_keeping_mtime(path: Path) -> None:
    info = path.stat()
    flip_byte(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def append_byte(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b"!")


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 1)


def replace_with_other_bytes(path: Path) -> None:
    other = path.with_name("other.tmp")
    other.write_bytes(bytes(reversed(path.read_bytes())))
    other.replace(path)


def link_outside(path: Path) -> None:
    outside = path.parent.parent / "outside.gguf"
    shutil.copy2(path, outside)  # the very same bytes: only the place is wrong
    path.unlink()
    path.symlink_to(outside)


TAMPERING = {
    "bytes flipped, mtime restored": (flip_keeping_mtime, "BLAKE3 differs", True),
    "appended": (append_byte, "(resized)", False),
    "truncated": (truncate, "(resized)", False),
    "replaced by another file": (replace_with_other_bytes, "BLAKE3 differs", True),
    "a link out of the root": (link_outside, "outside the model root", False),
}


@pytest.mark.parametrize("how", TAMPERING)
def test_tampering_is_a_pin_mismatch_naming_the_shard(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher, how: str
) -> None:
    tamper, found, hashed = TAMPERING[how]
    tamper(gguf_file)
    opened_before = set(os.listdir("/proc/self/fd"))

    with pytest.raises(PinMismatch) as refused:
        pin_and_close(registry)

    error = refused.value
    assert (error.model, error.shard) == ("tiny", "tiny.gguf")
    assert error.why.startswith("shard tiny.gguf: ")
    assert found in error.why
    assert str(error) == f"model tiny is not ready: {error.why}"
    assert hasher.take() == (["tiny.gguf"] if hashed else [])
    assert set(os.listdir("/proc/self/fd")) == opened_before  # nothing left open


def test_a_missing_file_is_not_ready_but_no_pin_mismatch(
    gguf_file: Path, registry: ModelRegistry
) -> None:
    gguf_file.rename(gguf_file.with_name("away.gguf"))
    with pytest.raises(ModelNotReady, match=r"shard tiny\.gguf: missing under") as refused:
        pin_and_close(registry)
    assert not isinstance(refused.value, PinMismatch)


def test_a_mismatch_is_sticky_and_a_restored_file_passes_a_full_check(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher
) -> None:
    original = gguf_file.read_bytes()
    flip_keeping_mtime(gguf_file)
    with pytest.raises(PinMismatch):
        pin_and_close(registry)
    gguf_file.write_bytes(original)
    hasher.take()
    pin_and_close(registry)  # refused before: a full check
    assert hasher.take() == ["tiny.gguf"]
    pin_and_close(registry)
    assert hasher.take() == []


def test_the_hash_is_read_from_the_descriptor_handed_back(gguf_file: Path) -> None:
    """Nothing is hashed by path: the digest comes from the descriptor the pin returns."""

    @attrs.define
    class DescriptorOnly:
        inodes: list[int] = attrs.Factory(list)

        def hash_file(self, path: Path, **_options: object) -> str:
            raise AssertionError(f"hashed by path: {path}")

        def hash_fd(self, fd: int, *, path: Path, on_progress: object = None) -> str:
            self.inodes.append(os.fstat(fd).st_ino)
            return Blake3Hasher().hash_fd(fd, path=path)

    manifest = ModelRegistry.in_memory().add(gguf_file, name="tiny")
    hasher = DescriptorOnly()
    registry = ModelRegistry.in_memory(hasher=hasher)
    with registry.pin(manifest) as pinned:
        assert hasher.inodes == [os.fstat(pinned.shard_fds()[0]).st_ino]


def test_a_file_replaced_while_it_is_hashed_is_not_served(
    gguf_file: Path, registry: ModelRegistry, hasher: CountingHasher
) -> None:
    """The verified inode was unlinked under the check (its ctime moved): not ready, and
    the next check finds the new file and refuses it."""

    @attrs.define
    class Swapping(CountingHasher):
        def hash_fd(self, fd: int, *, path: Path, on_progress: object = None) -> str:
            digest = Blake3Hasher().hash_fd(fd, path=path)
            replace_with_other_bytes(path)
            return digest

    manifest = registry.get("tiny")
    swapping = ModelRegistry.in_memory(hasher=Swapping())  # its first check is a full one
    with pytest.raises(ModelNotReady, match="changed while it was hashed") as refused:
        swapping.pin(manifest).close()
    assert not isinstance(refused.value, PinMismatch)
    with pytest.raises(PinMismatch, match="BLAKE3 differs"):
        registry.pin(manifest).close()
