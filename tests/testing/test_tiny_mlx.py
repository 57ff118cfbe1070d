"""The tiny deterministic mlx model directory from inferactors.testing."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer, pre_tokenizers

from inferactors import ModelFormat, ModelNotReady
from inferactors._models.hashing import safetensors_format
from inferactors._models.registry import ModelRegistry
from inferactors.testing._tiny_mlx import (
    SPECIAL_TOKENS,
    TINY_WORDS,
    byte_symbols,
    tiny_vocabulary,
    write_tiny_mlx,
)

FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
WEIGHTS_SIZE = 569_704
WEIGHTS_SHA256_PREFIX = "ddd04451"  # measured; numpy's seeded generator fixes every byte


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_mlx(tmp_path_factory.mktemp("tiny") / "tiny-mlx")


def test_writes_exactly_the_four_files(tiny: Path) -> None:
    assert sorted(p.name for p in tiny.iterdir()) == FILES
    assert (tiny / "model.safetensors").stat().st_size == WEIGHTS_SIZE


def test_every_file_is_byte_identical_on_every_write(tiny: Path, tmp_path: Path) -> None:
    again = write_tiny_mlx(tmp_path / "nested" / "again")
    for name in FILES:
        assert (again / name).read_bytes() == (tiny / name).read_bytes(), name
    weights = (tiny / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest().startswith(WEIGHTS_SHA256_PREFIX)


def test_rewriting_a_directory_keeps_other_files(tiny: Path, tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "config.json").write_text("{}")
    write_tiny_mlx(target)
    assert (target / "notes.txt").read_text() == "mine"
    assert (target / "config.json").read_bytes() == (tiny / "config.json").read_bytes()


def test_config_describes_a_two_layer_llama_matching_the_weights(tiny: Path) -> None:
    config = json.loads((tiny / "config.json").read_text())
    vocabulary = tiny_vocabulary()
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 2
    assert config["vocab_size"] == vocabulary.size == 530
    assert config["eos_token_id"] == vocabulary.eos_id == 2
    assert config["tie_word_embeddings"] is False
    with safe_open(str(tiny / "model.safetensors"), framework="numpy") as weights:
        names = set(weights.keys())
        assert weights.get_tensor("model.embed_tokens.weight").shape == (530, 64)
        assert weights.get_tensor("model.layers.1.self_attn.k_proj.weight").shape == (32, 64)
        assert weights.get_tensor("model.layers.0.mlp.down_proj.weight").shape == (64, 128)
    assert len(names) == 2 + 1 + 9 * 2  # embeddings, norm, output, 9 per layer
    assert "lm_head.weight" in names


def test_only_whole_word_pieces_get_logits(tiny: Path) -> None:
    with safe_open(str(tiny / "model.safetensors"), framework="numpy") as weights:
        output = weights.get_tensor("lm_head.weight")
    words = np.zeros(output.shape[0], dtype=bool)
    words[list(tiny_vocabulary().word_ids)] = True
    assert not output[~words].any()
    assert (np.abs(output[words]).sum(axis=1) > 0).all()
    assert words.sum() == len(TINY_WORDS) == 60


def test_weights_header_says_mlx(tiny: Path) -> None:
    assert safetensors_format(tiny / "model.safetensors") == "mlx"


def test_tokenizer_file_holds_the_hand_built_vocabulary(tiny: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    vocabulary = tiny_vocabulary()
    assert tokenizer.get_vocab() == {p: i for i, p in enumerate(vocabulary.pieces)}
    assert [tokenizer.token_to_id(s) for s in SPECIAL_TOKENS] == [0, 1, 2]
    river = tokenizer.encode(" river").ids
    assert len(river) == 1
    assert river[0] in vocabulary.word_ids


@pytest.mark.parametrize("text", ["the cat sat", "naïve 🙂 ünïcödé", "\x00\t\n", "<|im_end|>x"])
def test_any_text_round_trips_through_the_tokenizer(tiny: Path, text: str) -> None:
    tokenizer = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_config_names_eos_and_a_chat_template(tiny: Path) -> None:
    config = json.loads((tiny / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>"
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "add_generation_prompt" in config["chat_template"]


def test_byte_symbols_are_the_byte_level_alphabet() -> None:
    symbols = byte_symbols()
    assert len(set(symbols)) == 256
    assert set(symbols) == set(pre_tokenizers.ByteLevel.alphabet())
    assert symbols[ord(" ")] == "\u0120"
    assert symbols[ord("A")] == "A"


def test_vocabulary_merges_build_every_word_from_known_pieces() -> None:
    vocabulary = tiny_vocabulary()
    pieces = vocabulary.pieces
    assert len(set(pieces)) == len(pieces)
    seen = set(pieces[:259])
    for left, right in vocabulary.merges:
        assert left in seen
        assert right in seen
        seen.add(left + right)
    assert seen == set(pieces)
    assert [pieces[i] for i in vocabulary.word_ids] == ["\u0120" + w for w in TINY_WORDS]


def test_registry_pins_weights_tokenizer_and_config(tiny: Path) -> None:
    registry = ModelRegistry.in_memory()
    manifest = registry.add(tiny, name="tiny-mlx", format=ModelFormat.MLX)
    assert manifest.format is ModelFormat.MLX
    assert [f.path for f in manifest.shards] == ["model.safetensors"]
    assert manifest.shards[0].size == WEIGHTS_SIZE
    pinned = {f.path: f.size for f in manifest.tokenizer}
    assert pinned == {n: (tiny / n).stat().st_size for n in FILES if n != "model.safetensors"}
    resolved = registry.resolve("tiny-mlx")
    assert resolved.root == tiny.resolve()
    assert {p.name for p in resolved.tokenizer} == {
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }


def test_registry_detects_mlx_without_being_told(tiny: Path) -> None:
    assert ModelRegistry.in_memory().add(tiny, name="auto").format is ModelFormat.MLX


def test_registry_refuses_the_model_once_its_config_changes(tmp_path: Path) -> None:
    model = write_tiny_mlx(tmp_path / "m")
    registry = ModelRegistry.in_memory()
    registry.add(model, name="m")
    config = json.loads((model / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with pytest.raises(ModelNotReady, match=r"config\.json"):
        registry.resolve("m")


def test_missing_dependencies_name_the_extra_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[testing-models\]'"):
        write_tiny_mlx(tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_importing_the_module_imports_none_of_its_dependencies() -> None:
    code = (
        "import sys, inferactors.testing._tiny_mlx\n"
        "print(*(m in sys.modules for m in ('numpy', 'tokenizers', 'safetensors')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False", "False"]
