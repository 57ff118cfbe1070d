"""Tests of model file hashing (``_models/hashing.py``): BLAKE3 of a file streamed in chunks
with progress reports, and the format a safetensors header declares in its metadata.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import blake3
import pytest

from inferactors._models.hashing import blake3_fd, blake3_file, safetensors_format
from models.registry_support import safetensors_bytes


def test_blake3_file_streams_in_chunks_and_reports_progress(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    data = os.urandom(10_000)
    path.write_bytes(data)
    calls: list[tuple[int, int]] = []

    digest = blake3_file(path, chunk_size=4096, on_progress=lambda p, d, t: calls.append((d, t)))

    assert digest == blake3.blake3(data).hexdigest()
    assert calls == [(4096, 10_000), (8192, 10_000), (10_000, 10_000)]


@pytest.mark.parametrize("chunk_size", [4096, 1 << 20, 4 << 20, 64 << 20])
def test_the_threaded_read_ahead_hash_equals_a_single_threaded_one(
    tmp_path: Path, chunk_size: int
) -> None:
    """Two buffers alternate while BLAKE3 runs on every core: any mix-up of buffers,
    offsets or a lost last chunk would change the digest (9 MiB + 1 byte: no chunk size
    divides it)."""
    path = tmp_path / "big.bin"
    data = os.urandom((9 << 20) + 1)
    path.write_bytes(data)
    single = blake3.blake3(data, max_threads=1).hexdigest()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 123, os.SEEK_SET)
        assert blake3_fd(fd, path=path, chunk_size=chunk_size) == single
        assert os.lseek(fd, 0, os.SEEK_CUR) == 123  # pread: the offset is untouched
    finally:
        os.close(fd)
    assert blake3_file(path, chunk_size=chunk_size) == single


def test_blake3_file_of_an_empty_file_reports_once(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    calls: list[tuple[Path, int, int]] = []
    digest = blake3_file(path, on_progress=lambda p, d, t: calls.append((p, d, t)))
    assert digest == blake3.blake3(b"").hexdigest()
    assert calls == [(path, 0, 0)]


def test_safetensors_format_reads_the_header_metadata(tmp_path: Path) -> None:
    (tmp_path / "a.safetensors").write_bytes(safetensors_bytes({"format": "mlx"}) + b"x")
    (tmp_path / "b.safetensors").write_bytes(safetensors_bytes({}) + b"x")
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    assert safetensors_format(tmp_path / "a.safetensors") == "mlx"
    assert safetensors_format(tmp_path / "b.safetensors") is None
    assert safetensors_format(tmp_path / "c.safetensors") is None
