"""The llama-server build's source extraction on a Python with and without
``tarfile.data_filter`` (Debian stable's 3.11.2 has none): a good archive extracts, and an
archive with a member that writes outside the destination is refused before it writes."""

from __future__ import annotations

import io
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from inferactors._edges.safe_tar import extract_data
from inferactors._errors import BackendError

_Adder = Callable[[tarfile.TarFile], None]


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> _Adder:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    return add


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> _Adder:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        tar.addfile(info)

    return add


def _device(name: str) -> _Adder:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(info)

    return add


def _archive(path: Path, *adders: _Adder) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for add in adders:
            add(tar)
    return path


MALICIOUS = {
    "absolute": [_file("/tmp/inferactors-escape-abs")],
    "dotdot": [_file("src/../../escape")],
    "symlink-out": [_link("src/out", "../../outside")],
    "absolute-symlink": [_link("src/out", "/etc")],
    "hardlink-out": [_link("src/hard", "../outside", tarfile.LNKTYPE)],
    "device": [_device("src/null")],
    "through-link": [_link("src/l1", "."), _link("src/l1/l2", "../.."), _file("src/l2/x")],
}


@pytest.fixture(params=["data_filter", "fallback"])
def python_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both paths on any Python: the fallback by taking ``data_filter`` away, as 3.11.2 is."""
    if request.param == "fallback":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile.data_filter")
    return str(request.param)


def test_a_plain_archive_extracts(tmp_path: Path, python_kind: str) -> None:
    archive = _archive(
        tmp_path / "ok.tar.gz",
        _file("pkg/a.txt", b"hello"),
        _file("pkg/run.sh", b"#!/bin/sh\n", mode=0o4777),
        _link("pkg/b.txt", "a.txt"),
    )
    dest = tmp_path / "out"
    with tarfile.open(archive) as tar:
        extract_data(tar, dest, tar.getmembers())
    assert (dest / "pkg" / "a.txt").read_bytes() == b"hello"
    assert (dest / "pkg" / "b.txt").read_bytes() == b"hello"
    mode = stat.S_IMODE((dest / "pkg" / "run.sh").stat().st_mode)
    assert mode & (stat.S_ISUID | stat.S_IWOTH | stat.S_IWGRP) == 0, oct(mode)


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_a_member_writing_outside_is_refused(tmp_path: Path, python_kind: str, case: str) -> None:
    archive = _archive(tmp_path / "bad.tar.gz", *MALICIOUS[case])
    dest = tmp_path / "a" / "b" / "out"
    with tarfile.open(archive) as tar:
        if python_kind == "data_filter" and case == "absolute":
            extract_data(tar, dest, tar.getmembers())  # data_filter strips the leading "/"
            assert (dest / "tmp" / "inferactors-escape-abs").is_file()
        else:
            with pytest.raises(BackendError, match="refused to extract"):
                extract_data(tar, dest, tar.getmembers())
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")} - {Path("bad.tar.gz")}
    outside = {p for p in written if not str(p).startswith("a/b/out")}
    assert outside <= {Path("a"), Path("a/b")}, outside
    assert not Path("/tmp/inferactors-escape-abs").exists()
