"""The registry's record of verified blobs: the cheap re-check that survives a restart.

Beside the registry file ``models.json`` lies ``models.json.verified``: for each file that
passed a full BLAKE3 hash, its digest and the stat identity that proves it unchanged since,
``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``::

    {"schema": "inferactors.verified-blobs.v1",
     "blobs": [{"device": 2049, "inode": 131, "size": 522336, "mtime_ns": ...,
                "ctime_ns": ..., "blake3": "<64 hex>"}]}

A new registry object (a new runtime, a restarted supervisor) trusts a file without hashing
it only when its open descriptor's identity equals an entry's in all five fields **and**
that entry's digest is the one the manifest pins (`VerifiedRecord.vouches`). Anything else
is a full hash. Why that is enough, and what it does not cover: ``design/pinning.md``.

The record is a cache, never a source of errors: a file that is missing, not regular, not
ours, writable by anyone else, over `MAX_RECORD_BYTES`, not UTF-8 JSON of this schema, or
with a single malformed entry is ignored as a whole (every file is hashed) and rewritten at
the next save. Saves merge the changes into the file as it is on disk then, under the
registry's lock (``<registry>.lock``), through a new temporary file renamed over it (mode
0644, like the registry). There is no fsync: a record lost or torn by a crash costs a hash.

A file whose ctime is less than ``racy_margin_s`` (`RACY_MARGIN_S`) older than the moment
its check began is not recorded: a write in the same tick of the file system's clock as the
last one could leave ctime as it was (git's "racily clean" entries). All synchronous and
thread-safe; the registry runs it in its worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._atomic_file import write_atomically
from .._errors import BackendError
from .._safe_json import NotJson, parse_json
from .._untrusted_file import MiB
from .hashing import FileStamp
from .registry_file import file_lock

RECORD_SCHEMA = "inferactors.verified-blobs.v1"
RECORD_SUFFIX = ".verified"
"""The record's name is the registry file's name plus this."""

RACY_MARGIN_S = 3.0
"""A file changed less than this many seconds before its check began is not recorded: two
seconds of timestamp granularity (FAT) plus a clock tick, with room to spare."""

MAX_BLOBS = 4096
"""The most entries kept; the oldest are dropped first."""

MAX_RECORD_BYTES = 4 * MiB
"""A larger record file is ignored (an entry takes about 200 bytes)."""

_KEYS = frozenset({"device", "inode", "size", "mtime_ns", "ctime_ns", "blake3"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_Key = tuple[int, int]


@attrs.frozen
class VerifiedBlob:
    """One entry: the file with this identity hashed to ``blake3``."""

    stamp: FileStamp
    blake3: str


@attrs.define(eq=False)
class VerifiedRecord:
    """The verified-blob record of one registry file. Build it with `beside`.

    Attributes:
        registry: the registry file it belongs to (its lock is the record's too).
        racy_margin_ns: see `RACY_MARGIN_S`.
        clock_ns: the wall clock, in nanoseconds since the epoch (file times are on it).
    """

    registry: Path
    racy_margin_ns: int
    clock_ns: Callable[[], int] = time.time_ns
    _blobs: dict[_Key, VerifiedBlob] | None = None
    _changes: dict[_Key, VerifiedBlob | None] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @classmethod
    def beside(cls, registry: Path, *, racy_margin_s: float = RACY_MARGIN_S) -> VerifiedRecord:
        """The record of the registry file ``registry`` (read at its first use)."""
        return cls(registry, round(racy_margin_s * 1e9))

    @property
    def path(self) -> Path:
        """The record file: the registry's name plus `RECORD_SUFFIX`, in its directory."""
        return self.registry.with_name(self.registry.name + RECORD_SUFFIX)

    def vouches(self, stamp: FileStamp, blake3: str) -> bool:
        """Whether an entry has exactly ``stamp`` (all five fields) and the digest ``blake3``
        (the manifest's pin): then the file need not be hashed."""
        with self._lock:
            blob = self._loaded().get(_key(stamp))
        return blob is not None and blob.stamp == stamp and blob.blake3 == blake3

    def note(self, stamp: FileStamp, blake3: str, *, checked_since_ns: int) -> None:
        """Record that the file with ``stamp`` hashed to ``blake3`` in a check that began at
        ``checked_since_ns`` (`clock_ns`, read before the file was opened); nothing is
        recorded when its ctime is within ``racy_margin_ns`` of that moment."""
        if checked_since_ns - stamp.ctime_ns < self.racy_margin_ns:
            return
        blob = VerifiedBlob(stamp, blake3)
        with self._lock:
            blobs = self._loaded()
            blobs.pop(_key(stamp), None)  # re-inserted last: the newest entry
            blobs[_key(stamp)] = self._changes[_key(stamp)] = blob

    def forget(self, stamp: FileStamp) -> None:
        """Drop the entry of the file ``stamp`` names (its hash no longer matches)."""
        with self._lock:
            if self._loaded().pop(_key(stamp), None) is not None:
                self._changes[_key(stamp)] = None

    def save(self) -> None:
        """Merge the changes made since the last save into the file on disk and write it.

        Never raises for the file system: a record that cannot be written is a missed
        cache (the next runtime hashes), not a failed check."""
        with self._lock:
            changes, self._changes = self._changes, {}
        if not changes:
            return
        with contextlib.suppress(OSError, BackendError), file_lock(self.registry):
            blobs = read_blobs(self.path)
            for key, blob in changes.items():
                blobs.pop(key, None)
                if blob is not None:
                    blobs[key] = blob
            write_blobs(self.path, list(blobs.values())[-MAX_BLOBS:])

    def _loaded(self) -> dict[_Key, VerifiedBlob]:
        if self._blobs is None:
            self._blobs = read_blobs(self.path)
        return self._blobs


def _key(stamp: FileStamp) -> _Key:
    return stamp.device, stamp.inode


def read_blobs(path: Path) -> dict[_Key, VerifiedBlob]:
    """The entries of the record file at ``path`` by ``(device, inode)``, in file order;
    empty when the file is missing or not to be believed (see the module docstring)."""
    try:
        raw = _read_ours(path)
        blobs = [] if raw is None else _parse(parse_json(raw))
    except (OSError, NotJson, ValueError):
        return {}
    return {_key(blob.stamp): blob for blob in blobs}


def _read_ours(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a record we may believe (`_ours`, not too large)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not _ours(info) or info.st_size > MAX_RECORD_BYTES:
            return None
        return os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)


def _ours(info: os.stat_result) -> bool:
    """A regular file owned by our effective uid that nobody else may write."""
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.geteuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _parse(data: object) -> list[VerifiedBlob]:
    if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
        raise ValueError(f"not a record of schema {RECORD_SCHEMA}")
    if set(data) != {"schema", "boot", "blobs"} or not isinstance(data["blobs"], list):
        raise ValueError("expected the keys schema, boot and blobs, blobs a list")
    if data["boot"] != boot_id():
        return []  # device numbers are handed out again at each boot: nothing carries over
    return [_blob(item) for item in data["blobs"]]


def boot_id() -> str:
    """This boot's id (Linux ``/proc/sys/kernel/random/boot_id``), or ``""`` where there is
    none: a record is believed only within the boot that wrote it, since a filesystem
    mounted at another boot may get the same device number (NFS, FUSE, overlay)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as source:
            return source.read(64).strip()
    except OSError:
        return ""


def _blob(item: object) -> VerifiedBlob:
    if not isinstance(item, dict) or set(item) != _KEYS:
        raise ValueError(f"an entry has exactly the keys {sorted(_KEYS)}")
    digest = item["blake3"]
    if not isinstance(digest, str) or _HEX64.fullmatch(digest) is None:
        raise ValueError("blake3 must be 64 lower-case hex characters")
    numbers = [item[name] for name in ("size", "mtime_ns", "ctime_ns", "inode", "device")]
    if not all(type(number) is int for number in numbers):
        raise ValueError("size, mtime_ns, ctime_ns, inode and device must be integers")
    return VerifiedBlob(FileStamp(*numbers), digest)


def _blob_json(blob: VerifiedBlob) -> dict[str, Any]:
    stamp = blob.stamp
    return {
        "device": stamp.device,
        "inode": stamp.inode,
        "size": stamp.size,
        "mtime_ns": stamp.mtime_ns,
        "ctime_ns": stamp.ctime_ns,
        "blake3": blob.blake3,
    }


def write_blobs(path: Path, blobs: list[VerifiedBlob]) -> None:
    """Replace the record file with ``blobs`` (``_atomic_file.write_atomically``, mode
    0644): a planted link is replaced, never followed. No fsync (see the module docstring).

    Raises:
        OSError: the file could not be written.
    """
    entries = [_blob_json(blob) for blob in blobs]
    text = json.dumps({"schema": RECORD_SCHEMA, "boot": boot_id(), "blobs": entries})
    write_atomically(path, text.encode(), fsync=False)
