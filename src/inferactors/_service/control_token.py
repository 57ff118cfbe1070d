"""The control API's bearer token, read from a file the way a server's API key file is.

The file must be a regular file (not a symbolic link) of at most 4 KiB, owned by the
supervisor's user, with no permission for group or others (``chmod 600``), holding one line
of printable ASCII without spaces (a final ``\\n`` is allowed). Messages name the file and
never the token. Blocking; a few syscalls.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import InvalidConfig
from .._untrusted_file import read_secret_line

MIN_TOKEN_CHARS = 16
"""A shorter token is refused: it could be guessed over the loopback port."""


def read_token(path: Path, kind: str = "control token file") -> str:
    """The token in ``path`` (module docstring); ``kind`` names the file in errors (the
    front door's ``api_key_file`` says ``front door API key file``).

    Raises:
        InvalidConfig: missing or unreadable, not a regular file, over 4 KiB, owned by
            another user, open to group or others, or not one line of at least 16
            printable ASCII characters without spaces.
    """
    return read_secret_line(
        path,
        where=f"{kind} {path}",
        owner=os.geteuid(),
        whose="us",
        error=InvalidConfig,
        rule=f"must hold one line: a token of at least {MIN_TOKEN_CHARS} printable ASCII "
        "characters without spaces",
        min_len=MIN_TOKEN_CHARS,
    )
