"""The model registry's file-system edge: hash model files in place.

`FileHasher` is the Protocol everything hashes through; `Blake3Hasher` is the real one, and
tests swap in a counting wrapper to see which files a lazy check re-hashed. Files are read
with ``pread`` in 4 MiB chunks into two reused buffers, the next chunk read in a thread of
its own while BLAKE3 hashes the current one on every core (``max_threads=AUTO``), so memory
stays flat whatever the model size, and nothing is ever copied to disk. Not ``update_mmap``: it
maps by path, not the descriptor that was checked, and a file truncated while mapped is a SIGBUS
that ends the whole supervisor (``design/pinning.md``). Checking a pinned file (from a
descriptor opened beneath the model root) is ``pinning.py``; scanning a model to register it
is ``scan.py``. Files are hashed in place (streaming BLAKE3) and never copied, and every file
must resolve inside the model root (or, for a Hugging Face repository, its ``blobs/``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import attrs
import blake3

from .._safe_json import parse_json

CHUNK_SIZE = 4 << 20
"""Bytes read per chunk: 4 MiB (large enough for BLAKE3's threads, small enough to stay in
cache between the read and the hash)."""

SMALL_FILE = 1 << 20
"""Files shorter than this (1 MiB) are read in one ``pread``, without `read_ahead`'s two
4 MiB buffers and reader thread (which cost more than hashing them)."""

ProgressFn = Callable[[Path, int, int], None]
"""``on_progress(path, done_bytes, total_bytes)``, called after every chunk (and once for an
empty file with ``(path, 0, 0)``)."""


class FileHasher(Protocol):
    """Computes the BLAKE3 digest of one file."""

    def hash_file(self, path: Path, *, on_progress: ProgressFn | None = None) -> str:
        """Return the 64-character lower-case hex BLAKE3 digest of the file at ``path``.

        Raises:
            OSError: the file cannot be opened or read.
        """
        ...

    def hash_fd(self, fd: int, *, path: Path, on_progress: ProgressFn | None = None) -> str:
        """Return the hex BLAKE3 digest of the open file ``fd`` (read from offset 0 with
        ``pread``, so its offset is left alone); ``path`` only names it for ``on_progress``.

        Raises:
            OSError: the descriptor cannot be read.
        """
        ...


@attrs.frozen
class Blake3Hasher:
    """The real hasher: streams the file through BLAKE3 (on every core) in ``chunk_size``
    byte chunks."""

    chunk_size: int = CHUNK_SIZE

    def hash_file(self, path: Path, *, on_progress: ProgressFn | None = None) -> str:
        """Return the hex BLAKE3 digest of ``path``; see `FileHasher.hash_file`."""
        return blake3_file(path, on_progress=on_progress, chunk_size=self.chunk_size)

    def hash_fd(self, fd: int, *, path: Path, on_progress: ProgressFn | None = None) -> str:
        """Return the hex BLAKE3 digest of ``fd``; see `FileHasher.hash_fd`."""
        return blake3_fd(fd, path=path, on_progress=on_progress, chunk_size=self.chunk_size)


def blake3_file(
    path: Path, *, on_progress: ProgressFn | None = None, chunk_size: int = CHUNK_SIZE
) -> str:
    """Hash ``path`` with BLAKE3 as `blake3_fd` does.

    Args:
        path: the file to hash (symlinks are followed).
        on_progress: called as ``(path, done_bytes, total_bytes)`` after each chunk; the total
            is the size when the file was opened.
        chunk_size: bytes per read, 4 MiB by default.

    Returns:
        The digest as 64 lower-case hex characters.

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return blake3_fd(fd, path=path, on_progress=on_progress, chunk_size=chunk_size)
    finally:
        os.close(fd)


def blake3_fd(
    fd: int, *, path: Path, on_progress: ProgressFn | None = None, chunk_size: int = CHUNK_SIZE
) -> str:
    """Hash the open file ``fd`` with BLAKE3 on every core, ``chunk_size`` bytes per
    ``pread``, each chunk read while the one before is hashed (`read_ahead`). Memory stays
    at two chunks; the descriptor's offset is untouched. Blocking (about 0.2-0.3 s per GiB
    on two cores here): async callers run it in a worker thread, and since both the reads and
    BLAKE3 release the GIL, the event loop keeps running meanwhile.

    Args:
        fd: a descriptor open for reading; it stays open.
        path: how ``on_progress`` names the file.
        on_progress: called as ``(path, done_bytes, total_bytes)`` after each chunk; the total
            is the size when hashing began.
        chunk_size: bytes per read, 4 MiB by default.

    Returns:
        The digest as 64 lower-case hex characters.

    Raises:
        OSError: the descriptor cannot be read.
    """
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    total = os.fstat(fd).st_size
    done = 0
    if on_progress is not None and total == 0:
        on_progress(path, 0, 0)
    for chunk in read_ahead(fd, chunk_size):
        hasher.update(chunk)
        done += len(chunk)
        if on_progress is not None:
            on_progress(path, done, total)
    return hasher.hexdigest()


def blake3_and_fd(
    fd: int,
    also: str,
    *,
    path: Path,
    on_progress: ProgressFn | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[str, str]:
    """BLAKE3 and a second digest of the open file ``fd`` in one read, as `blake3_fd` reads:
    the digest a signature signed the file with when it is not BLAKE3 (``also``:
    ``"sha256"`` or ``"blake2"``, BLAKE2b as OpenSSF Model Signing names it).

    Returns:
        ``(blake3 hex, other hex)``.

    Raises:
        OSError: the descriptor cannot be read.
    """
    other = hashlib.blake2b() if also == "blake2" else hashlib.new(also)
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    total, done = os.fstat(fd).st_size, 0
    if on_progress is not None and total == 0:
        on_progress(path, 0, 0)
    for chunk in read_ahead(fd, chunk_size):
        hasher.update(chunk)
        other.update(chunk)
        done += len(chunk)
        if on_progress is not None:
            on_progress(path, done, total)
    return hasher.hexdigest(), other.hexdigest()


def read_ahead(fd: int, chunk_size: int) -> Iterator[memoryview]:
    """The bytes of ``fd`` from offset 0 in chunks of at most ``chunk_size``, through two
    reused buffers: while the caller holds one chunk, the next is read (``preadv``) into the
    other buffer by a reader thread of this call's own. A chunk is valid until the next one
    is asked for. Ends at the first empty read. A file under `SMALL_FILE` bytes (a
    tokenizer, a config, a signature) and under ``chunk_size`` is one ``pread``: no
    buffers, no thread.

    Raises:
        OSError: a read failed.
    """
    small = min(SMALL_FILE, chunk_size)
    first = os.pread(fd, small, 0)
    if len(first) < small:
        if first:
            yield memoryview(first)
        return
    buffers = (bytearray(chunk_size), bytearray(chunk_size))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferactors-read") as reader:
        offset, turn = 0, 0
        count = os.preadv(fd, [buffers[0]], 0)
        while count:
            ahead = reader.submit(os.preadv, fd, [buffers[1 - turn]], offset + count)
            yield memoryview(buffers[turn])[:count]
            offset, turn, count = offset + count, 1 - turn, ahead.result()


@attrs.frozen
class FileStamp:
    """What a lazy check compares; a file is re-hashed when any field changed."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        """The stamp of a ``stat`` result."""
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def differs_from(self, other: FileStamp) -> str | None:
        """Which of ctime, mtime and size differ in ``other`` (``"ctime differs"``, ``"ctime
        and size differ"``), or None. A writer cannot set ctime back: any write changes it."""
        fields = [
            name
            for name, mine, theirs in (
                ("ctime", self.ctime_ns, other.ctime_ns),
                ("mtime", self.mtime_ns, other.mtime_ns),
                ("size", self.size, other.size),
            )
            if mine != theirs
        ]
        if not fields:
            return None
        return " and ".join(fields) + (" differ" if len(fields) > 1 else " differs")


@attrs.frozen
class CheckFailure:
    """Why a pinned file failed its check; ``sticky`` when it means tampering (refused)
    rather than absence (a disk not mounted yet)."""

    reason: str
    sticky: bool
    file: str = ""
    """The pinned file's relative path, or empty when the failure is not one file's."""
    missing: bool = False
    """The file is not there (not sticky by itself: a disk not mounted yet)."""


def safetensors_format(path: Path) -> object:
    """The ``__metadata__.format`` of a safetensors header (an 8-byte little-endian length,
    then that much JSON), or None when absent, unreadable or the header is over 16 MiB."""
    with contextlib.suppress(OSError, ValueError), path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if length <= 16 << 20:
            header = parse_json(handle.read(length))
            metadata = header.get("__metadata__") if isinstance(header, dict) else None
            return metadata.get("format") if isinstance(metadata, dict) else None
    return None
