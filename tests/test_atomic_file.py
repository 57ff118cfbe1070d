"""`write_atomically`, the one atomic save (``_atomic_file.py``): a reader sees the old file
or the new one; a link at the target is replaced, not followed; the mode is the one asked
for whatever the umask; a failure or an interrupt leaves the target and no staging file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from inferactors._atomic_file import write_atomically


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_it_replaces_the_file_with_the_mode_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "registry.json"
    target.write_text("old")
    previous = os.umask(0o077)
    try:
        write_atomically(target, b"new", mode=0o644)
        write_atomically(tmp_path / "server.json", b"{}", mode=0o600, fsync=False)
    finally:
        os.umask(previous)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "server.json").stat().st_mode) == 0o600
    assert _names(tmp_path) == ["registry.json", "server.json"]  # no staging file left


def test_a_link_planted_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not yours")
    target = tmp_path / "model.sig"
    target.symlink_to(elsewhere)
    write_atomically(target, b"signature")
    assert not target.is_symlink()
    assert target.read_bytes() == b"signature"
    assert elsewhere.read_text() == "not yours"


def test_a_folder_at_the_target_is_an_error_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomically(tmp_path / "taken", b"x")
    assert _names(tmp_path) == ["taken"]
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "file", b"x")


def test_an_interrupt_mid_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "registry.json"
    target.write_text("old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, b"new")
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["registry.json"]
