"""Tests of model file hashing (``_models/hashing.py``): BLAKE3 of a file streamed in chunks
with progress reports, and the format a safetensors header declares in its metadata.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import blake3

from inferactors._models.hashing import blake3_file, safetensors_format
from models.registry_support import safetensors_bytes


def test_blake3_file_streams_in_chunks_and_reports_progress(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    data = os.urandom(10_000)
    path.write_bytes(data)
    calls: list[tuple[int, int]] = []

    digest = blake3_file(path, chunk_size=4096, on_progress=lambda p, d, t: calls.append((d, t)))

    assert digest == blake3.blake3(data).hexdigest()
    assert calls == [(4096, 10_000), (8192, 10_000), (10_000, 10_000)]


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
