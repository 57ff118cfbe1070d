"""Replacing a file atomically: `write_atomically`, the one way every layer saves a file
(the registry, a signature, a server record, a verified-blob record, a ``--help`` cache).

A new file is made beside the target with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (never an
existing file, never through a link), given its mode whatever the umask, written, fsynced
when the caller asks, then renamed over the target from the folder's descriptor (a link at
the target is replaced, never followed). A reader sees the old file or the new one, never
a part. On any failure, or an interrupt, the new file is removed and the target is as it
was. Blocking; a few system calls (plus the fsyncs).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

STAGING_NAME_CHARS = 80
"""How much of the target's name the staging file's name repeats (a name stays short)."""


def write_atomically(target: Path, data: bytes, *, mode: int = 0o644, fsync: bool = True) -> None:
    """Replace ``target`` with ``data`` (module docstring), the new file with ``mode``.
    ``fsync``: the data and then the folder are flushed to disk before it returns (a crash
    of the machine keeps the old or the new file); without it a crash of the kernel may
    lose the write, which a record that only serves the same boot can afford.

    Raises:
        OSError: the folder cannot be written, or ``target`` is a folder.
    """
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        staging = f".{target.name[:STAGING_NAME_CHARS]}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(staging, flags, mode, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(data)
                if fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(staging, target.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staging, dir_fd=folder)
            raise
        if fsync:
            os.fsync(folder)
    finally:
        os.close(folder)
