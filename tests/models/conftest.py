"""Fixtures for the model registry's tests: a counting hasher, a tiny GGUF file, a Hugging
Face style directory, a registry path not yet written, private copies of the tiny models,
and key pairs.

``registry_path`` here replaces the root conftest's (which registers the tiny model): these
tests start from no registry file at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from models.registry_support import GGUF_BYTES, CountingHasher, safetensors_bytes
from models.signing_support import KeyPair, make_key


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


@pytest.fixture
def gguf_copy(tmp_path: Path, tiny_gguf: Path) -> Path:
    """A private copy of the tiny GGUF (tests change it), alone in its folder."""
    folder = tmp_path / "gguf"
    folder.mkdir()
    return Path(shutil.copy2(tiny_gguf, folder / "tiny.gguf"))


@pytest.fixture
def mlx_copy(tmp_path: Path, tiny_mlx_model: Path) -> Path:
    """A private copy of the tiny mlx model directory (tests change it)."""
    return Path(shutil.copytree(tiny_mlx_model, tmp_path / "mlx" / "tiny"))


@pytest.fixture
def ops(tmp_path: Path) -> KeyPair:
    """The operator's P-256 key pair."""
    return make_key(tmp_path / "keys", "ops")


@pytest.fixture
def stranger(tmp_path: Path) -> KeyPair:
    """Someone else's P-256 key pair."""
    return make_key(tmp_path / "keys", "stranger")
