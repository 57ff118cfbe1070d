"""Tests of adding a model to the registry: a GGUF file or a model directory is hashed in
place and nothing is copied, its format is detected (or overridden within limits), names
must be plain tokens not yet taken, paths without a model or leading outside are refused,
and an Ollama model is registered by its tag alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from inferactors import InvalidConfig, ModelFormat
from inferactors._models.manifest import ModelFile, ModelManifest, ModelSource
from inferactors._models.manifest_io import REGISTRY_SCHEMA, check_model_name
from inferactors._models.registry import ModelRegistry
from models.registry_support import GGUF_BYTES, CountingHasher, file_tree, safetensors_bytes


def test_add_gguf_file_hashes_in_place_and_copies_nothing(
    gguf_file: Path, registry_path: Path
) -> None:
    before = file_tree(gguf_file.parent)
    registry = ModelRegistry.open(registry_path)

    manifest = registry.add(gguf_file, name="tiny", source=ModelSource(hf_repo="me/tiny"))

    assert manifest == ModelManifest(
        name="tiny",
        format=ModelFormat.GGUF,
        root=str(gguf_file.parent),
        shards=(ModelFile("tiny.gguf", len(GGUF_BYTES), blake3.blake3(GGUF_BYTES).hexdigest()),),
        source=ModelSource(hf_repo="me/tiny"),
    )
    assert file_tree(gguf_file.parent) == before
    saved = json.loads(registry_path.read_text())
    assert saved["schema"] == REGISTRY_SCHEMA
    assert [m["name"] for m in saved["models"]] == ["tiny"]


def test_add_directory_pins_shards_and_tokenizer_files(hf_dir: Path) -> None:
    before = file_tree(hf_dir)
    manifest = ModelRegistry.in_memory().add(hf_dir, name="hf")

    assert manifest.format is ModelFormat.SAFETENSORS
    assert manifest.root == str(hf_dir)
    assert [f.path for f in manifest.shards] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert [f.path for f in manifest.tokenizer] == [
        "chat_template.jinja",
        "config.json",
        "tokenizer.json",
    ]
    config = manifest.tokenizer[1]
    assert config.blake3 == blake3.blake3((hf_dir / "config.json").read_bytes()).hexdigest()
    assert file_tree(hf_dir) == before


def test_add_directory_detects_mlx_from_config(hf_dir: Path) -> None:
    (hf_dir / "config.json").write_text('{"quantization": {"group_size": 64, "bits": 4}}')
    assert ModelRegistry.in_memory().add(hf_dir, name="m").format is ModelFormat.MLX


def test_add_directory_detects_mlx_from_safetensors_metadata(hf_dir: Path) -> None:
    shard = hf_dir / "model-00001-of-00002.safetensors"
    shard.write_bytes(safetensors_bytes({"format": "mlx"}) + b"weights")
    assert ModelRegistry.in_memory().add(hf_dir, name="m").format is ModelFormat.MLX


def test_add_format_override_and_its_limits(hf_dir: Path, gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    assert registry.add(hf_dir, name="m", format=ModelFormat.MLX).format is ModelFormat.MLX
    with pytest.raises(InvalidConfig, match=r"^format: gguf needs only \.gguf shards"):
        registry.add(hf_dir, name="g", format=ModelFormat.GGUF)
    with pytest.raises(InvalidConfig, match=r"^format: mlx does not fit"):
        registry.add(gguf_file, name="g", format=ModelFormat.MLX)
    with pytest.raises(InvalidConfig, match=r"^format: ollama models are registered by tag"):
        registry.add(hf_dir, name="o", format=ModelFormat.OLLAMA)
    assert [m.name for m in registry.list()] == ["m"]


def test_add_directory_of_gguf_files_is_gguf(tmp_path: Path) -> None:
    for part in ("a-00001-of-00002.gguf", "a-00002-of-00002.gguf"):
        (tmp_path / part).write_bytes(GGUF_BYTES)
    manifest = ModelRegistry.in_memory().add(tmp_path, name="split")
    assert manifest.format is ModelFormat.GGUF
    assert len(manifest.shards) == 2


@pytest.mark.parametrize(
    "name", ["has space", "../etc/passwd", "", "a" * 129, "-lead", ".hidden", "a/b", "x\n"]
)
def test_add_refuses_names_that_are_not_plain_tokens(gguf_file: Path, name: str) -> None:
    registry = ModelRegistry.in_memory(hasher=CountingHasher())
    with pytest.raises(InvalidConfig, match=r"^name: .* is not a model name"):
        registry.add(gguf_file, name=name)
    assert registry.list() == ()


@pytest.mark.parametrize("name", ["a", "a" * 128, "qwen3:0.6b", "Llama-3.1+x_y", "0"])
def test_plain_token_names_are_accepted(name: str) -> None:
    assert check_model_name(name) == name


def test_add_refuses_a_taken_name_before_hashing(
    gguf_file: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.open(registry_path, hasher=hasher)
    registry.add(gguf_file, name="tiny")
    saved = registry_path.read_bytes()
    hasher.take()

    with pytest.raises(InvalidConfig, match=r"^name: a model named 'tiny' is already registered$"):
        registry.add(gguf_file, name="tiny")

    assert hasher.take() == []
    assert registry_path.read_bytes() == saved


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope", r"^path: .*nope is not an existing file or directory"),
        (lambda p: p / "notes.txt", r"^path: .*notes\.txt is not a \.gguf file"),
        (lambda p: p / "empty", r"^path: no weight files \(\.bin, \.ckpt, .*\) in .*empty"),
    ],
)
def test_add_refuses_paths_without_a_model(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(InvalidConfig, match=message):
        ModelRegistry.in_memory().add(make(tmp_path), name="m")


def test_add_refuses_a_directory_with_a_link_leading_outside(hf_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(b"weights")
    (hf_dir / "model-00003.safetensors").symlink_to(outside)
    with pytest.raises(InvalidConfig, match=r"^path: model-00003\.safetensors resolves to .*"):
        ModelRegistry.in_memory().add(hf_dir, name="m")


def test_add_of_a_symlinked_gguf_pins_its_target(gguf_file: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.gguf"
    link.symlink_to(gguf_file)
    registry = ModelRegistry.in_memory()
    manifest = registry.add(link, name="tiny")
    assert manifest.root == str(gguf_file.parent)
    assert registry.resolve("tiny").shards == (gguf_file,)


def test_add_reports_hashing_progress(gguf_file: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    ModelRegistry.in_memory().add(
        gguf_file, name="tiny", on_progress=lambda p, d, t: seen.append((p.name, d, t))
    )
    assert seen[-1] == ("tiny.gguf", len(GGUF_BYTES), len(GGUF_BYTES))


def test_add_ollama_pins_no_files_and_resolves_to_its_tag(registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    manifest = registry.add_ollama("qwen", "qwen3:0.6b")
    assert manifest.format is ModelFormat.OLLAMA
    assert manifest.shards == ()
    resolved = ModelRegistry.open(registry_path).resolve("qwen")
    assert resolved.ollama_tag == "qwen3:0.6b"
    assert resolved.shards == ()
    with pytest.raises(InvalidConfig, match=r"^\$\.source\.ollama_tag: expected 1 to 256"):
        registry.add_ollama("other", "has space")
