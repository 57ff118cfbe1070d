"""Tests of `build_views`: a private directory of links to verified descriptors, made
afresh at every spawn, that holds the pinned names and nothing else (issue 8, items 4, 5)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from inferactors._models.pinned_view import build_views


def test_a_view_holds_one_link_per_pinned_file_and_nothing_else(tmp_path: Path) -> None:
    instance = tmp_path / "instance"
    files = {"config.json": 7, "model.safetensors": 8, "sub/tokenizer.json": 9}
    (view,) = build_views(instance, [("model", "tiny-mlx", files)], fd_dir="/proc/self/fd")
    try:
        where = instance / "pinned" / "model" / "tiny-mlx"
        assert os.path.samestat(os.fstat(view), where.stat())
        assert sorted(os.listdir(view)) == ["config.json", "model.safetensors", "sub"]
        assert os.readlink(where / "model.safetensors") == "/proc/self/fd/8"
        assert os.readlink(where / "sub" / "tokenizer.json") == "/proc/self/fd/9"
        for directory in (where.parent.parent, where.parent, where, where / "sub"):
            info = directory.lstat()
            assert stat.S_IMODE(info.st_mode) == 0o755  # readable by the server, never writable
            assert info.st_uid == os.geteuid()
        assert os.get_inheritable(view) is False
    finally:
        os.close(view)


def test_whatever_was_left_or_planted_in_its_place_is_removed_never_followed(
    tmp_path: Path,
) -> None:
    instance, elsewhere = tmp_path / "instance", tmp_path / "elsewhere"
    (instance / "pinned" / "model" / "m").mkdir(parents=True)
    (instance / "pinned" / "model" / "m" / "model-evil.safetensors").write_bytes(b"junk")
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("kept")
    fds = build_views(instance, [("model", "m", {"a.gguf": 5})], fd_dir="/dev/fd")
    for fd in fds:
        os.close(fd)
    assert os.listdir(instance / "pinned" / "model" / "m") == ["a.gguf"]

    shutil.rmtree(instance / "pinned")
    (instance / "pinned").symlink_to(elsewhere)  # the server's user could plant this
    (first, second) = build_views(
        instance, [("model", "m", {"a.gguf": 5}), ("draft", "d", {"b.gguf": 6})], fd_dir="/dev/fd"
    )
    os.close(first)
    os.close(second)
    assert not (instance / "pinned").is_symlink()
    assert os.listdir(elsewhere) == ["keep"]
    assert os.readlink(instance / "pinned" / "draft" / "d" / "b.gguf") == "/dev/fd/6"
