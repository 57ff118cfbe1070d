"""The registry file on disk: atomic saves, the cross-process lock, its stamp and reading it.

The file I/O of the registry's entries (`registry_entries.RegistryEntries`): every save is
atomic (temporary file, fsync, ``os.replace``, fsync of the directory), so a crash leaves the
old file; updates hold an exclusive ``flock`` on ``<registry>.lock`` so that two processes
adding models do not lose each other's entries; the file's `FileStamp` tells when it changed
on disk. The text format is `manifest_io`'s, a JSON file. All synchronous.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from .._atomic_file import write_atomically
from .._errors import BackendError
from .._untrusted_file import MiB, read_capped_text
from .hashing import FileStamp
from .manifest import ModelManifest
from .manifest_io import registry_from_text

MAX_REGISTRY_BYTES = 16 * MiB
"""The largest registry file read (a manifest is well under 1 KiB per file it pins)."""


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (``_atomic_file.write_atomically``, with
    fsyncs): a failure leaves the old file as it was. The new file keeps the old one's
    permissions (``0o644`` for a first save).

    Raises:
        BackendError: naming the file.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text.encode(), mode=_mode_to_keep(path))
    except OSError as error:
        raise BackendError(f"{path}: cannot save the registry: {error}") from error


def _mode_to_keep(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


@contextlib.contextmanager
def file_lock(path: Path | None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (nothing for an in-memory registry)."""
    if path is None:
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise BackendError(f"{lock_path}: cannot lock the registry: {error}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def registry_stamp(path: Path) -> FileStamp | None:
    """The stamp of the registry file at ``path``, or None when there is no such file.

    Raises:
        BackendError: the file cannot be stat'ed.
    """
    try:
        return FileStamp.of(path.stat())
    except FileNotFoundError:
        return None
    except OSError as error:
        raise BackendError(f"{path}: cannot read the registry: {error}") from error


def read_registry(path: Path) -> tuple[ModelManifest, ...]:
    """The manifests in the registry file at ``path``.

    Raises:
        InvalidConfig: the file is not a regular file, is over 16 MiB or not UTF-8
            (`inferactors._untrusted_file.read_capped`), or is malformed (see
            `registry_from_text`).
        BackendError: the file cannot be read.
    """
    try:
        text = read_capped_text(path, MAX_REGISTRY_BYTES, "registry")
    except OSError as error:
        raise BackendError(f"{path}: cannot read the registry: {error}") from error
    return registry_from_text(text, origin=str(path))
