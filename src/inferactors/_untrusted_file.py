"""Reading a file we were pointed at (a run file, a registry, a model's ``config.json``) with
a bound on what it may cost.

Issue 8 item 3. ``Path.read_text`` trusts the path: a run file that is a symlink to
``/dev/zero`` grew to 5.5 GB, a FIFO blocked forever, a directory failed with an OS error.
`read_capped` opens with ``O_NONBLOCK | O_CLOEXEC`` (opening a FIFO does not wait for a
writer), accepts only a regular file (``fstat`` of the open descriptor, so a swap after a
check cannot fool it), refuses one whose size is over the cap, and reads at most cap + 1
bytes (a file that grows while it is read is refused too). Blocking; a few syscalls.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ._errors import InvalidConfig

MiB = 1 << 20


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
    finally:
        os.close(fd)


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
