"""Shared arrange code for the model registry's tests: the bytes of a tiny GGUF file, a
hasher that records what it hashes, a safetensors header, and small file edits.

Imported as ``models.registry_support``; the fixtures built on it live in this folder's
``conftest.py``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import attrs

from inferactors._models.hashing import Blake3Hasher, ProgressFn

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 8


@attrs.define
class CountingHasher:
    """The real hasher, recording the name of every file it hashes."""

    hashed: list[str] = attrs.field(factory=list)

    def hash_file(self, path: Path, *, on_progress: ProgressFn | None = None) -> str:
        self.hashed.append(path.name)
        return Blake3Hasher().hash_file(path, on_progress=on_progress)

    def hash_fd(self, fd: int, *, path: Path, on_progress: ProgressFn | None = None) -> str:
        self.hashed.append(path.name)
        return Blake3Hasher().hash_fd(fd, path=path, on_progress=on_progress)

    def take(self) -> list[str]:
        hashed, self.hashed = sorted(self.hashed), []
        return hashed


def safetensors_bytes(metadata: dict[str, str]) -> bytes:
    """A safetensors header with ``metadata`` (none when empty) and no tensors."""
    header = json.dumps({"__metadata__": metadata} if metadata else {}).encode()
    return struct.pack("<Q", len(header)) + header


def flip_byte(path: Path, offset: int = 10) -> None:
    """Change one byte in place, keeping the size."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def file_tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}
