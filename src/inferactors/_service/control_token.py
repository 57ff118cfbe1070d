"""The control API's bearer token, read from a file the way a server's API key file is.

The file must be a regular file (not a symbolic link) of at most 4 KiB, owned by the
supervisor's user, with no permission for group or others (``chmod 600``), holding one line
of printable ASCII without spaces (a final ``\\n`` is allowed). Messages name the file and
never the token. Blocking; a few syscalls.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .._errors import InvalidConfig

MAX_TOKEN_FILE_BYTES = 4096
MIN_TOKEN_CHARS = 16
"""A shorter token is refused: it could be guessed over the loopback port."""


def read_token(path: Path) -> str:
    """The token in ``path`` (module docstring).

    Raises:
        InvalidConfig: missing or unreadable, not a regular file, over 4 KiB, owned by
            another user, open to group or others, or not one line of at least 16
            printable ASCII characters without spaces.
    """
    where = f"control token file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as error:
        raise InvalidConfig(f"{where}: cannot be opened: {error.strerror}") from None
    try:
        _check(where, os.fstat(fd))
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    return _token_of(where, data)


def _check(where: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise InvalidConfig(f"{where}: not a regular file")
    if info.st_uid != os.geteuid():
        raise InvalidConfig(f"{where}: owned by uid {info.st_uid}, not by us (uid {os.geteuid()})")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise InvalidConfig(f"{where}: mode {mode:04o} lets group or others use it; chmod 600 it")


def _token_of(where: str, data: bytes) -> str:
    body = data.removesuffix(b"\n")
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise InvalidConfig(f"{where}: larger than {MAX_TOKEN_FILE_BYTES} bytes")
    if len(body) < MIN_TOKEN_CHARS or any(byte <= 0x20 or byte > 0x7E for byte in body):
        raise InvalidConfig(
            f"{where}: must hold one line: a token of at least {MIN_TOKEN_CHARS} printable "
            "ASCII characters without spaces"
        )
    return body.decode("ascii")
