"""Reading a file we were pointed at (a run file, a registry, a model's ``config.json``) with
a bound on what it may cost.

``Path.read_text`` trusts the path: a run file that is a symlink to ``/dev/zero`` grew to
5.5 GB, a FIFO blocked forever, a directory failed with an OS error. `read_capped` opens
with ``O_NONBLOCK | O_CLOEXEC`` (opening a FIFO does not wait for a writer), accepts only a
regular file (``fstat`` of the open descriptor, so a swap after a check cannot fool it),
refuses one whose size is over the cap, and reads at most cap + 1 bytes (a file that grows
while it is read is refused too). Blocking; a few syscalls.

`read_secret_line` reads a one-line secret (a server's API key, the control API's token):
not through a symbolic link, a regular file of at most 4 KiB owned by the given user with no
access for group or others, one line of printable ASCII without spaces; messages name the
file and never the secret.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from ._errors import InferactorsError, InvalidConfig

MiB = 1 << 20

MAX_SECRET_FILE_BYTES = 4096
"""Largest secret file read (bytes)."""


def read_capped(path: Path, cap: int, what: str) -> bytes:
    """The bytes of the regular file at ``path``, at most ``cap`` of them.

    Args:
        path: The file (symlinks are followed; what they lead to must be a regular file).
        cap: The most bytes accepted.
        what: What the file is, for messages (``"run file"``, ``"registry"``).

    Raises:
        InvalidConfig: ``"<path>: the run file is not a regular file (a FIFO)"`` or
            ``"<path>: the registry is larger than its limit of 16 MiB"``.
        OSError: the file cannot be opened or read (missing, no permission, ...).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return read_capped_fd(fd, path, cap, what)
    finally:
        os.close(fd)


def read_capped_fd(fd: int, path: Path, cap: int, what: str) -> bytes:
    """`read_capped` on a file already open as ``fd`` (left open); ``path`` names it in
    messages.

    Raises:
        InvalidConfig: as `read_capped`.
        OSError: it cannot be read.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise InvalidConfig(f"{path}: the {what} is not a regular file ({_kind(info)})")
    if info.st_size > cap:
        raise InvalidConfig(_too_large(path, what, cap))
    chunks: list[bytes] = []
    left = cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        raise InvalidConfig(_too_large(path, what, cap))
    return b"".join(chunks)


def read_capped_text(path: Path, cap: int, what: str) -> str:
    """`read_capped`, decoded as UTF-8.

    Raises:
        InvalidConfig: as `read_capped`, or ``"<path>: the run file is not UTF-8 text (byte
            12)"``.
        OSError: as `read_capped`.
    """
    data = read_capped(path, cap, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidConfig(f"{path}: the {what} is not UTF-8 text (byte {error.start})") from None


def read_secret_line(
    path: Path,
    *,
    where: str,
    owner: int,
    whose: str,
    error: type[InferactorsError],
    rule: str,
    min_len: int = 1,
    not_regular: str = "not a regular file",
    group_use: str = "use",
    size_first: bool = False,
    owner_reads: bool = False,
    check_line: Callable[[bytes], None] | None = None,
) -> str:
    """The line in the secret file at ``path`` (module docstring), without one trailing
    ``\\n``. Every refusal is ``error("<where>: ...")`` and never shows the secret.

    Args:
        path: The file; a symbolic link is refused (``O_NOFOLLOW``).
        where: What the file is, with its path, opening every message.
        owner: The uid that must own the file.
        whose: Who ``owner`` is, for the message (``"us"``).
        error: The error raised.
        rule: The message (after ``where``) for a line shorter than ``min_len`` or with a
            byte that is not printable ASCII or is a space.
        min_len: The fewest characters in the line.
        not_regular: The message (after ``where``) for a file that is not a regular file.
        group_use: What group or others may do with it, for the message (``"use"``).
        size_first: Refuse a file over the cap by its size before reading and before the
            owner and mode checks.
        owner_reads: Refuse a mode without the owner's read bit.
        check_line: Run on the line (bytes) before ``rule`` is checked; raises ``error``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as failure:
        raise error(f"{where}: cannot be opened: {failure.strerror}") from None
    too_large = f"{where}: larger than {MAX_SECRET_FILE_BYTES} bytes"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{where}: {not_regular}")
        if size_first and info.st_size > MAX_SECRET_FILE_BYTES:
            raise error(too_large)
        if info.st_uid != owner:
            raise error(f"{where}: owned by uid {info.st_uid}, not by {whose} (uid {owner})")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise error(
                f"{where}: mode {mode:04o} lets group or others {group_use} it; chmod 600 it"
            )
        if owner_reads and not mode & 0o400:
            raise error(f"{where}: mode {mode:04o}: its owner cannot read it")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise error(too_large)
    body = data.removesuffix(b"\n")
    if check_line is not None:
        check_line(body)
    if len(body) < min_len or any(byte <= 0x20 or byte > 0x7E for byte in body):
        raise error(f"{where}: {rule}")
    return body.decode("ascii")


def _too_large(path: Path, what: str, cap: int) -> str:
    limit = f"{cap // MiB} MiB" if cap % MiB == 0 else f"{cap} bytes"
    return f"{path}: the {what} is larger than its limit of {limit}"


def _kind(info: os.stat_result) -> str:
    mode = info.st_mode
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a plain file")
