"""A server's API key file (``serve.api_key_file``), read and checked at admission: the
key llama-server would take from ``--api-key-file``, refused with the field and the reason
(never the key) when the file is not the server user's own private one-line key. Split from
``admission``, which calls `read_api_key` for managed and adopted servers alike."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio

from .._errors import AdmissionRefused
from .._policy.privilege import RunAs
from .._untrusted_file import read_secret_line


async def read_api_key(path: str, *, run_as: RunAs | None, euid: int) -> str:
    """The key in ``path`` (module docstring), read in a worker thread through one
    descriptor.

    Raises:
        AdmissionRefused: missing or unreadable, not a regular file, over 4 KiB, not owned
            by the server's user (``run_as``, else us), readable or writable by group or
            others, holding a carriage return (a Windows line ending: llama-server would
            keep it in the key) or a control or non-ASCII byte, or not exactly one line of
            printable ASCII without spaces, ended by one optional ``\\n``.
    """
    owner = run_as.uid if run_as is not None else euid
    return await trio.to_thread.run_sync(_read_key, Path(path), owner)


_KEY_RULE = "must hold one line, the key: printable ASCII without spaces, not starting with '#'"


def _read_key(path: Path, owner: int) -> str:
    where = f"serve.api_key_file {path}"
    return read_secret_line(
        path,
        where=where,
        owner=owner,
        whose="the server's user",
        error=AdmissionRefused,
        rule=_KEY_RULE,
        not_regular="not a regular file (or a symbolic link)",
        group_use="read or write",
        size_first=True,
        owner_reads=True,
        check_line=partial(_check_key_line, where),
    )


def _check_key_line(where: str, body: bytes) -> None:
    """The key is the line before one optional ``\\n``, exactly what llama-server takes
    from ``--api-key-file`` (checked with the pinned build: ``sk\\r\\n`` is the key
    ``sk\\r``, which no client can send), so a ``\\r`` or any byte that is not printable
    ASCII is refused, saying where and never the key."""
    if b"\r" in body:
        raise AdmissionRefused(
            f"{where}: holds a carriage return (\\r, a Windows line ending); llama-server "
            "would keep it as part of the key and refuse every request: end the line with "
            "\\n only"
        )
    if any(map(_odd_byte, body)):
        raise AdmissionRefused(
            f"{where}: holds a control or non-ASCII character; the key must be printable "
            "ASCII (llama-server compares it byte for byte)"
        )
    if body.startswith(b"#"):
        raise AdmissionRefused(f"{where}: {_KEY_RULE}")


def _odd_byte(byte: int) -> bool:
    """A byte no key holds: a control character other than a line's ``\\n``, or not ASCII."""
    return byte != 0x0A and (byte < 0x20 or byte > 0x7E)
