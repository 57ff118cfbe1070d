"""The tiny deterministic GGUF model from inferactors.testing."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import inferactors.testing
from inferactors import ModelFormat
from inferactors._models.registry import ModelRegistry
from inferactors.testing import write_tiny_gguf
from inferactors.testing._tiny_models import tiny_vocabulary

REFERENCE_SHA256_PREFIX = "768c01cc"  # real-servers.md: the reference script's output
TINY_SIZE = 522_336


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_bytes_match_the_reference_and_every_run(tiny: Path, tmp_path: Path) -> None:
    again = write_tiny_gguf(tmp_path / "nested" / "again.gguf")
    data = tiny.read_bytes()
    assert again.read_bytes() == data
    assert len(data) == TINY_SIZE
    assert hashlib.sha256(data).hexdigest().startswith(REFERENCE_SHA256_PREFIX)


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].contents()


def test_header_describes_a_two_layer_llama(tiny: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(tiny)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == 420
    assert tokens[:4] == ["<unk>", "<s>", "</s>", "<0x00>"]
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2


def test_only_word_pieces_get_logits(tiny: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(tiny)
    output = next(t for t in reader.tensors if t.name == "output.weight").data
    pieces, _ = tiny_vocabulary()
    words = np.array([p.startswith("\u2581") and len(p) > 1 for p in pieces])
    assert output.shape == (420, 64)
    assert not output[~words].any()
    assert np.abs(output[words]).min(axis=1).min() > 0


def test_vocabulary_has_byte_fallback_and_distinct_pieces() -> None:
    pieces, types = tiny_vocabulary()
    assert len(pieces) == len(set(pieces)) == len(types) == 420
    assert pieces[3 + 0x41] == "<0x41>"
    assert types[3 + 0x41] == 6
    assert types[:3] == [2, 3, 3]
    assert pieces[-66:][0] == "\u2581the"


def test_missing_dev_dependencies_name_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[testing-models\]'"):
        write_tiny_gguf(tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_importing_the_testing_package_needs_neither_gguf_nor_numpy() -> None:
    code = "import sys, inferactors.testing; print('gguf' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"]


def test_testing_all_is_sorted_and_complete() -> None:
    assert inferactors.testing.__all__ == sorted(inferactors.testing.__all__)
    assert "write_tiny_gguf" in inferactors.testing.__all__


def test_tiny_model_registers_and_resolves(tiny: Path) -> None:
    registry = ModelRegistry.in_memory()
    manifest = registry.add(tiny, name="tiny")
    assert manifest.format is ModelFormat.GGUF
    assert manifest.shards[0].size == TINY_SIZE
    assert registry.resolve("tiny").shards == (tiny,)
