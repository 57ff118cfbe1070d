"""Tests of the registry file: it round-trips (also as text, for any manifests), a missing
file is an empty registry, removals and other registry objects' additions persist, a
corrupt file is reported by file and field and never overwritten, a failed save keeps the
old file, and saves keep the file's mode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferactors import BackendError, InvalidConfig, ModelFormat, UnknownModel
from inferactors._models.manifest import (
    SIGNED_ALGORITHMS,
    ModelFile,
    ModelManifest,
    ModelSignature,
    ModelSource,
)
from inferactors._models.manifest_io import (
    REGISTRY_SCHEMA,
    manifest_from_json,
    manifest_to_json,
    registry_from_text,
    registry_to_text,
)
from inferactors._models.registry import ModelRegistry
from models.registry_support import GGUF_BYTES


def test_registry_file_round_trips(gguf_file: Path, hf_dir: Path, registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    registry.add(hf_dir, name="hf", source=ModelSource(hf_repo="me/hf", hf_revision="abc"))
    registry.add_ollama("qwen", "qwen3:0.6b")

    reopened = ModelRegistry.open(registry_path)

    assert reopened.list() == registry.list()
    assert [m.name for m in reopened.list()] == ["hf", "qwen", "tiny"]
    assert registry_from_text(registry_path.read_text(), origin="x") == registry.list()


def test_missing_registry_file_is_empty(tmp_path: Path) -> None:
    registry = ModelRegistry.open(tmp_path / "nothing" / "models.json")
    assert registry.list() == ()
    assert not (tmp_path / "nothing").exists()


def test_remove_forgets_the_model_and_keeps_its_files(gguf_file: Path, registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    removed = registry.remove("tiny")
    assert removed.name == "tiny"
    assert ModelRegistry.open(registry_path).list() == ()
    assert gguf_file.read_bytes() == GGUF_BYTES
    with pytest.raises(UnknownModel, match="no registered model 'tiny'"):
        registry.remove("tiny")


def test_a_second_registry_object_sees_and_keeps_additions(
    gguf_file: Path, hf_dir: Path, registry_path: Path
) -> None:
    first = ModelRegistry.open(registry_path)
    second = ModelRegistry.open(registry_path)
    first.add(gguf_file, name="tiny")
    assert second.get("tiny").root == str(gguf_file.parent)
    second.add(hf_dir, name="hf")
    assert [m.name for m in first.list()] == ["hf", "tiny"]


def _valid_registry(gguf_file: Path) -> dict[str, object]:
    shard = {"path": "tiny.gguf", "size": 4, "blake3": "0" * 64}
    model = {"name": "m0", "format": "gguf", "root": str(gguf_file.parent), "shards": [shard]}
    models = [dict(model, name=f"m{i}", shards=[dict(shard)]) for i in range(3)]
    return {"schema": REGISTRY_SCHEMA, "models": models}


def _bad_digest(doc: dict[str, object]) -> None:
    doc["models"][2]["shards"][0]["blake3"] = "ABC"  # type: ignore[index]  # test JSON


def _dup_name(doc: dict[str, object]) -> None:
    doc["models"][1]["name"] = "m0"  # type: ignore[index]  # test JSON


def _extra_key(doc: dict[str, object]) -> None:
    doc["models"][0]["envelope"] = "x"  # type: ignore[index]  # test JSON


def _bad_signature(doc: dict[str, object]) -> None:
    doc["models"][0]["signature"] = "x"  # type: ignore[index]  # test JSON


def _signature_without_signer(doc: dict[str, object]) -> None:
    file = {"path": "model.sig", "size": 10, "blake3": "a" * 64}
    signature = file | {"algorithm": "blake3", "anchor": "ops"}
    doc["models"][0]["signature"] = signature  # type: ignore[index]  # test JSON


def _signature_is_a_shard(doc: dict[str, object]) -> None:
    shard = doc["models"][0]["shards"][0]  # type: ignore[index]  # test JSON
    signer = {"algorithm": "sha256", "anchor": "ops", "signer": "key sha256:00"}
    doc["models"][0]["signature"] = shard | signer  # type: ignore[index]  # test JSON


def _signature_bad_algorithm(doc: dict[str, object]) -> None:
    file = {"path": "model.sig", "size": 10, "blake3": "a" * 64}
    signer = {"algorithm": "md5", "anchor": "ops", "signer": "key sha256:00"}
    doc["models"][0]["signature"] = file | signer  # type: ignore[index]  # test JSON


def _escaping_path(doc: dict[str, object]) -> None:
    doc["models"][1]["shards"][0]["path"] = "../x.gguf"  # type: ignore[index]  # test JSON


def _relative_root(doc: dict[str, object]) -> None:
    doc["models"][0]["root"] = "models"  # type: ignore[index]  # test JSON


def _bad_size(doc: dict[str, object]) -> None:
    doc["models"][0]["shards"][0]["size"] = -1  # type: ignore[index]  # test JSON


def _bad_schema(doc: dict[str, object]) -> None:
    doc["schema"] = "weftos.model-registry.v1"


def _no_shards(doc: dict[str, object]) -> None:
    doc["models"][0]["shards"] = []  # type: ignore[index]  # test JSON


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_bad_digest, "$.models[2].shards[0].blake3: expected 64 lower-case hex characters"),
        (_dup_name, "$.models[1].name: duplicate name 'm0'"),
        (_extra_key, "$.models[0].envelope: unknown key"),
        (_bad_signature, "$.models[0].signature: expected an object, got a string"),
        (_signature_without_signer, "$.models[0].signature.signer: missing"),
        (_signature_is_a_shard, "$.models[0].signature.path: 'tiny.gguf' is also a pinned"),
        (_signature_bad_algorithm, "$.models[0].signature.algorithm: 'md5' is not one of"),
        (_escaping_path, "$.models[1].shards[0].path: '../x.gguf' must be a relative path"),
        (_relative_root, "$.models[0].root: expected an absolute directory, got 'models'"),
        (_bad_size, "$.models[0].shards[0].size: expected a byte count >= 0, got -1"),
        (_bad_schema, "$.schema: expected 'inferactors.model-registry.v1'"),
        (_no_shards, "$.models[0].shards: a gguf model needs at least one shard"),
    ],
)
def test_corrupt_registry_names_the_file_and_field(
    gguf_file: Path, registry_path: Path, corrupt: Callable[[dict[str, object]], None], message: str
) -> None:
    doc = _valid_registry(gguf_file)
    registry_path.parent.mkdir(parents=True)
    registry_path.write_text(json.dumps(doc))
    ModelRegistry.open(registry_path)  # the valid file opens
    corrupt(doc)
    registry_path.write_text(json.dumps(doc))

    with pytest.raises(InvalidConfig) as caught:
        ModelRegistry.open(registry_path)

    assert str(caught.value).startswith(f"{registry_path}: {message}")


def test_add_does_not_overwrite_a_corrupt_registry(gguf_file: Path, registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    registry_path.write_text('{"schema": "inferactors.model-registry.v1", "models": [{}]}')
    garbage = registry_path.read_bytes()

    with pytest.raises(InvalidConfig, match=r"models\.json: \$\.models\[0\]\.name: missing"):
        registry.add(gguf_file, name="other")
    registry_path.write_text("{not json")
    with pytest.raises(InvalidConfig, match=r"models\.json: not valid JSON"):
        ModelRegistry.open(registry_path)
    with pytest.raises(InvalidConfig, match=r"models\.json: not valid JSON"):
        registry.add_ollama("o", "o:latest")

    assert registry_path.read_bytes() == b"{not json"
    assert garbage != b"{not json"


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(
    gguf_file: Path, hf_dir: Path, registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    saved = registry_path.read_bytes()

    def crash(src: object, dst: object, **dir_fds: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(BackendError, match=r"models\.json: cannot save the registry: .*No space"):
        registry.add(hf_dir, name="hf")
    monkeypatch.undo()

    assert registry_path.read_bytes() == saved
    assert sorted(p.name for p in registry_path.parent.iterdir()) == [
        "models.json",
        "models.json.lock",
    ]
    assert [m.name for m in registry.list()] == ["tiny"]
    assert [m.name for m in ModelRegistry.open(registry_path).list()] == ["tiny"]


_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,20}", fullmatch=True)
_digests = st.text("0123456789abcdef", min_size=64, max_size=64)
_rel_paths = st.from_regex(r"[a-z0-9_-]{1,8}(/[a-z0-9_-]{1,8})?\.[a-z]{1,5}", fullmatch=True)
_tags = st.from_regex(r"[a-z0-9./:-]{1,30}", fullmatch=True)


@st.composite
def _manifests(draw: st.DrawFn) -> ModelManifest:
    fmt = draw(st.sampled_from(ModelFormat))
    if fmt is ModelFormat.OLLAMA:
        return ModelManifest(draw(_names), fmt, "", (), (), ModelSource(ollama_tag=draw(_tags)))
    paths = draw(st.lists(_rel_paths, min_size=1, max_size=6, unique=True))
    split = draw(st.integers(1, len(paths)))
    files = [ModelFile(p, draw(st.integers(0, 2**45)), draw(_digests)) for p in paths]
    source = ModelSource(
        hf_repo=draw(st.none() | _tags),
        hf_revision=draw(st.none() | _tags),
        ollama_tag=draw(st.none() | _tags),
    )
    shards = tuple(sorted(files[:split], key=lambda f: f.path))
    tokenizer = tuple(sorted(files[split:], key=lambda f: f.path))
    signature = None
    if draw(st.booleans()):
        file = ModelFile("signatures/model.sig", draw(st.integers(0, 2**20)), draw(_digests))
        algorithm = draw(st.sampled_from(SIGNED_ALGORITHMS))
        signer = "key sha256:" + draw(_digests)
        signature = ModelSignature(file, algorithm, draw(_names), signer)
    root = "/models/" + draw(_names)
    return ModelManifest(draw(_names), fmt, root, shards, tokenizer, source, signature)


@settings(max_examples=60)
@given(st.lists(_manifests(), max_size=4, unique_by=lambda m: m.name))
def test_registry_text_round_trips(manifests: list[ModelManifest]) -> None:
    text = registry_to_text(manifests)
    assert registry_from_text(text, origin="models.json") == tuple(
        sorted(manifests, key=lambda m: m.name)
    )
    for manifest in manifests:
        assert manifest_from_json(manifest_to_json(manifest)) == manifest


def test_saves_keep_the_registry_file_mode(gguf_file: Path, registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    assert registry_path.stat().st_mode & 0o777 == 0o644
    registry_path.chmod(0o600)
    registry.add_ollama("qwen", "qwen3:0.6b")
    assert registry_path.stat().st_mode & 0o777 == 0o600
