"""``serve.api_key_file`` is read at admission through one descriptor and refused unless it
is a small regular file of one line, owned by the server's user, private to it; no message
ever holds the key (issue 9 item 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferactors._actors.api_key_file import read_api_key
from inferactors._errors import AdmissionRefused

KEY = "sk-0123456789abcdef"


def write(tmp_path: Path, body: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_bytes(body)
    path.chmod(mode)
    return path


async def read(path: Path) -> str:
    return await read_api_key(str(path), run_as=None, euid=os.geteuid())


async def refusal(path: Path) -> str:
    with pytest.raises(AdmissionRefused) as info:
        await read(path)
    message = str(info.value)
    assert KEY not in message
    return message


@pytest.mark.parametrize("body", [KEY.encode(), f"{KEY}\n".encode()])
async def test_one_line_with_or_without_its_newline(tmp_path: Path, body: bytes) -> None:
    assert await read(write(tmp_path, body)) == KEY


@pytest.mark.parametrize("body", [f"{KEY}\r\n".encode(), f"{KEY}\r".encode(), b"a\rb\n"])
async def test_a_carriage_return_is_refused(tmp_path: Path, body: bytes) -> None:
    """llama-server keeps a ``\\r`` in the key (tests/e2e/test_api_key_bytes.py)."""
    assert "holds a carriage return (\\r, a Windows line ending)" in await refusal(
        write(tmp_path, body)
    )


@pytest.mark.parametrize("body", [b"\xff\xfe", b"sk\x00\n", b"sk\t1", "sk\u00e9".encode()])
async def test_a_control_or_non_ascii_byte_is_refused(tmp_path: Path, body: bytes) -> None:
    assert "holds a control or non-ASCII character" in await refusal(write(tmp_path, body))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660, 0o644])
async def test_group_or_other_access_is_refused(tmp_path: Path, mode: int) -> None:
    message = await refusal(write(tmp_path, KEY.encode(), mode))
    assert f"mode {mode:04o} lets group or others read or write it; chmod 600 it" in message


@pytest.mark.parametrize(
    "body", [b"", b"\n", f"{KEY}\nsecond\n".encode(), b"with space", b"# comment"]
)
async def test_anything_but_one_plain_line_is_refused(tmp_path: Path, body: bytes) -> None:
    assert "must hold one line, the key" in await refusal(write(tmp_path, body))


async def test_the_file_kind_size_and_owner_are_checked(tmp_path: Path) -> None:
    assert "larger than 4096 bytes" in await refusal(write(tmp_path, b"k" * 4097))
    link = tmp_path / "link"
    link.symlink_to(write(tmp_path, KEY.encode()))
    assert "cannot be opened" in await refusal(link)
    assert "cannot be opened" in await refusal(tmp_path / "missing")
    other = os.geteuid() + 1
    with pytest.raises(AdmissionRefused, match=f"not by the server's user \\(uid {other}\\)"):
        await read_api_key(str(write(tmp_path, KEY.encode())), run_as=None, euid=other)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert "not a regular file" in await refusal(fifo)
