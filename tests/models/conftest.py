"""Fixtures for the model registry's tests: a counting hasher, a tiny GGUF file, a Hugging
Face style directory, and a registry path not yet written.

``registry_path`` here replaces the root conftest's (which registers the tiny model): these
tests start from no registry file at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models.registry_support import GGUF_BYTES, CountingHasher, safetensors_bytes


@pytest.fixture
def hasher() -> CountingHasher:
    return CountingHasher()


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    path = model_dir / "tiny.gguf"
    path.write_bytes(GGUF_BYTES)
    return path


@pytest.fixture
def hf_dir(tmp_path: Path) -> Path:
    """A Hugging Face style directory: two safetensors shards and three small text files."""
    root = tmp_path / "hf-model"
    root.mkdir()
    (root / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes({}) + b"a" * 100)
    (root / "model-00002-of-00002.safetensors").write_bytes(safetensors_bytes({}) + b"b" * 100)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "tokenizer.json").write_text('{"model": {}}')
    (root / "chat_template.jinja").write_text("{{ messages }}")
    (root / "README.md").write_text("ignored")
    (root / ".hidden.json").write_text("ignored")
    (root / "sub").mkdir()
    (root / "sub" / "extra.safetensors").write_bytes(b"ignored")
    return root


@pytest.fixture
def registry_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "models.json"
