"""The model registry: adding, the registry file, and the full / lazy / sticky checks."""

from __future__ import annotations

import json
import os
import re
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferactors import BackendError, InvalidConfig, ModelFormat, ModelNotReady, UnknownModel
from inferactors._models.hashing import Blake3Hasher, ProgressFn, blake3_file, safetensors_format
from inferactors._models.manifest import ModelFile, ModelManifest, ModelSource
from inferactors._models.manifest_io import (
    REGISTRY_SCHEMA,
    check_model_name,
    manifest_from_json,
    manifest_to_json,
    registry_from_text,
    registry_to_text,
)
from inferactors._models.registry import ModelCheck, ModelRegistry

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 8


@attrs.define
class CountingHasher:
    """The real hasher, recording the name of every file it hashes."""

    hashed: list[str] = attrs.field(factory=list)

    def hash_file(self, path: Path, *, on_progress: ProgressFn | None = None) -> str:
        self.hashed.append(path.name)
        return Blake3Hasher().hash_file(path, on_progress=on_progress)

    def take(self) -> list[str]:
        hashed, self.hashed = sorted(self.hashed), []
        return hashed


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
    (root / "model-00001-of-00002.safetensors").write_bytes(_safetensors({}) + b"a" * 100)
    (root / "model-00002-of-00002.safetensors").write_bytes(_safetensors({}) + b"b" * 100)
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


def _safetensors(metadata: dict[str, str]) -> bytes:
    header = json.dumps({"__metadata__": metadata} if metadata else {}).encode()
    return struct.pack("<Q", len(header)) + header


def _flip_byte(path: Path, offset: int = 10) -> None:
    """Change one byte in place, keeping the size."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- hashing -------------------------------------------------------------------------------------


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
    (tmp_path / "a.safetensors").write_bytes(_safetensors({"format": "mlx"}) + b"x")
    (tmp_path / "b.safetensors").write_bytes(_safetensors({}) + b"x")
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    assert safetensors_format(tmp_path / "a.safetensors") == "mlx"
    assert safetensors_format(tmp_path / "b.safetensors") is None
    assert safetensors_format(tmp_path / "c.safetensors") is None


# -- add -----------------------------------------------------------------------------------------


def test_add_gguf_file_hashes_in_place_and_copies_nothing(
    gguf_file: Path, registry_path: Path
) -> None:
    before = _tree(gguf_file.parent)
    registry = ModelRegistry.open(registry_path)

    manifest = registry.add(gguf_file, name="tiny", source=ModelSource(hf_repo="me/tiny"))

    assert manifest == ModelManifest(
        name="tiny",
        format=ModelFormat.GGUF,
        root=str(gguf_file.parent),
        shards=(ModelFile("tiny.gguf", len(GGUF_BYTES), blake3.blake3(GGUF_BYTES).hexdigest()),),
        source=ModelSource(hf_repo="me/tiny"),
    )
    assert _tree(gguf_file.parent) == before
    saved = json.loads(registry_path.read_text())
    assert saved["schema"] == REGISTRY_SCHEMA
    assert [m["name"] for m in saved["models"]] == ["tiny"]


def test_add_directory_pins_shards_and_tokenizer_files(hf_dir: Path) -> None:
    before = _tree(hf_dir)
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
    assert _tree(hf_dir) == before


def test_add_directory_detects_mlx_from_config(hf_dir: Path) -> None:
    (hf_dir / "config.json").write_text('{"quantization": {"group_size": 64, "bits": 4}}')
    assert ModelRegistry.in_memory().add(hf_dir, name="m").format is ModelFormat.MLX


def test_add_directory_detects_mlx_from_safetensors_metadata(hf_dir: Path) -> None:
    shard = hf_dir / "model-00001-of-00002.safetensors"
    shard.write_bytes(_safetensors({"format": "mlx"}) + b"weights")
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


# -- the registry file ---------------------------------------------------------------------------


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
    doc["models"][0]["signature"] = "x"  # type: ignore[index]  # test JSON


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
        (_extra_key, "$.models[0].signature: unknown key"),
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

    def crash(src: object, dst: object) -> None:
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
    return ModelManifest(draw(_names), fmt, "/models/" + draw(_names), shards, tokenizer, source)


@settings(max_examples=60)
@given(st.lists(_manifests(), max_size=4, unique_by=lambda m: m.name))
def test_registry_text_round_trips(manifests: list[ModelManifest]) -> None:
    text = registry_to_text(manifests)
    assert registry_from_text(text, origin="models.json") == tuple(
        sorted(manifests, key=lambda m: m.name)
    )
    for manifest in manifests:
        assert manifest_from_json(manifest_to_json(manifest)) == manifest


# -- resolve: full, lazy, sticky -----------------------------------------------------------------


def test_first_resolve_hashes_everything_then_only_what_changed(
    hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    hasher.take()

    resolved = registry.resolve("hf")
    assert len(hasher.take()) == 5
    assert resolved.root == hf_dir.resolve()
    assert resolved.shards[0] == hf_dir / "model-00001-of-00002.safetensors"
    assert resolved.tokenizer[1] == hf_dir / "config.json"

    registry.resolve("hf")
    assert hasher.take() == []

    config = hf_dir / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    registry.resolve("hf")
    assert hasher.take() == ["config.json"]
    registry.resolve("hf")
    assert hasher.take() == []


def test_each_registry_object_starts_with_a_full_check(
    gguf_file: Path, registry_path: Path, hasher: CountingHasher
) -> None:
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    first = ModelRegistry.open(registry_path, hasher=hasher)
    first.resolve("tiny")
    first.resolve("tiny")
    ModelRegistry.open(registry_path, hasher=hasher).resolve("tiny")
    assert hasher.take() == ["tiny.gguf", "tiny.gguf"]


TAMPERED = "model tiny is not ready: shard tiny.gguf: BLAKE3 differs from the registry"


def test_full_check_catches_a_flipped_byte_of_the_same_size(
    gguf_file: Path, registry_path: Path
) -> None:
    ModelRegistry.open(registry_path).add(gguf_file, name="tiny")
    stat = gguf_file.stat()
    _flip_byte(gguf_file)
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime looks untouched
    assert gguf_file.stat().st_size == stat.st_size

    with pytest.raises(ModelNotReady) as caught:
        ModelRegistry.open(registry_path).resolve("tiny")

    assert str(caught.value) == f"{TAMPERED} (tampered or replaced)"


def test_lazy_check_catches_a_touched_tampered_file(
    gguf_file: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    registry.resolve("tiny")
    _flip_byte(gguf_file)
    os.utime(gguf_file, ns=(0, gguf_file.stat().st_mtime_ns + 10**9))
    hasher.take()

    with pytest.raises(ModelNotReady, match=f"^{re.escape(TAMPERED)}"):
        registry.resolve("tiny")
    assert hasher.take() == ["tiny.gguf"]


def test_lazy_check_sees_through_a_restored_mtime(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    registry.resolve("tiny")
    stat = gguf_file.stat()
    _flip_byte(gguf_file)
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ctime still moves
    with pytest.raises(ModelNotReady, match=f"^{re.escape(TAMPERED)}"):
        registry.resolve("tiny")


def test_a_refusal_is_sticky_until_a_full_check_passes(
    hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    registry.resolve("hf")
    shard = hf_dir / "model-00002-of-00002.safetensors"
    original = shard.read_bytes()
    _flip_byte(shard)
    with pytest.raises(ModelNotReady, match=r"shard model-00002-of-00002\.safetensors: BLAKE3"):
        registry.resolve("hf")
    with pytest.raises(ModelNotReady, match=r"shard model-00002-of-00002\.safetensors: BLAKE3"):
        registry.resolve("hf")
    shard.write_bytes(original)
    hasher.take()

    registry.resolve("hf")  # refused: a full check, every file
    assert len(hasher.take()) == 5
    registry.resolve("hf")  # passed: lazy again
    assert hasher.take() == []


def test_missing_file_is_not_ready_but_not_sticky(hf_dir: Path, hasher: CountingHasher) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    registry.resolve("hf")
    config = hf_dir / "config.json"
    moved = hf_dir / "config.moved"
    config.rename(moved)

    with pytest.raises(
        ModelNotReady, match=r"^model hf is not ready: tokenizer file config\.json: missing under"
    ):
        registry.resolve("hf")
    moved.rename(config)
    hasher.take()
    registry.resolve("hf")
    assert hasher.take() == ["config.json"]  # lazy: only the file that went away


def test_missing_root_is_not_ready(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    gguf_file.unlink()
    gguf_file.parent.rmdir()
    with pytest.raises(ModelNotReady, match=r"^model tiny is not ready: root .* is missing"):
        registry.resolve("tiny")


def test_resized_file_is_refused_without_hashing(gguf_file: Path, hasher: CountingHasher) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    with gguf_file.open("ab") as handle:
        handle.write(b"!")
    hasher.take()

    with pytest.raises(ModelNotReady) as caught:
        registry.resolve("tiny")

    size = len(GGUF_BYTES)
    assert str(caught.value) == (
        f"model tiny is not ready: shard tiny.gguf: size is {size + 1} bytes, "
        f"the registry pins {size} (resized)"
    )
    assert hasher.take() == []


def test_a_symlink_leading_outside_the_root_is_refused(hf_dir: Path, tmp_path: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(hf_dir, name="hf")
    shard = hf_dir / "model-00001-of-00002.safetensors"
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(shard.read_bytes())  # same content: only the location is wrong
    shard.unlink()
    shard.symlink_to(outside)

    with pytest.raises(ModelNotReady, match=r"shard model-00001-of-00002\.safetensors: resolves"):
        registry.resolve("hf")


def test_hugging_face_cache_links_into_blobs_are_inside(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--me--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "aa11").write_bytes(_safetensors({"format": "mlx"}) + b"w")
    (repo / "blobs" / "bb22").write_text("{}")
    (snapshot / "model.safetensors").symlink_to("../../blobs/aa11")
    (snapshot / "config.json").symlink_to("../../blobs/bb22")
    registry = ModelRegistry.in_memory()

    manifest = registry.add(snapshot, name="tiny-mlx")
    resolved = registry.resolve("tiny-mlx")

    assert manifest.format is ModelFormat.MLX
    assert resolved.shards == (snapshot / "model.safetensors",)


def test_unknown_models_are_refused(gguf_file: Path) -> None:
    registry = ModelRegistry.in_memory()
    registry.add(gguf_file, name="tiny")
    for call in (registry.get, registry.resolve, registry.verify, registry.remove):
        with pytest.raises(UnknownModel, match=r"^no registered model 'other'$"):
            call("other")


def test_verify_reports_each_model_and_clears_a_refusal(
    gguf_file: Path, hf_dir: Path, hasher: CountingHasher
) -> None:
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(gguf_file, name="tiny")
    registry.add(hf_dir, name="hf")
    registry.add_ollama("qwen", "qwen3:0.6b")
    _flip_byte(gguf_file)

    checks = registry.verify()

    assert checks == [
        ModelCheck("hf", True, "5 files verified"),
        ModelCheck("qwen", True, "ollama tag qwen3:0.6b: no files pinned (Ollama keeps them)"),
        ModelCheck(
            "tiny",
            False,
            "shard tiny.gguf: BLAKE3 differs from the registry (tampered or replaced)",
        ),
    ]
    _flip_byte(gguf_file)
    assert registry.verify("tiny") == [ModelCheck("tiny", True, "1 file verified")]
    hasher.take()
    registry.resolve("tiny")
    assert hasher.take() == []  # verify's full check counts: resolve is lazy


def test_concurrent_first_resolves_hash_each_file_once(hf_dir: Path) -> None:
    @attrs.define
    class SlowHasher(CountingHasher):
        def hash_file(self, path: Path, *, on_progress: ProgressFn | None = None) -> str:
            time.sleep(0.01)  # widen the window in which two checks could overlap
            return super().hash_file(path, on_progress=on_progress)

    hasher = SlowHasher()
    registry = ModelRegistry.in_memory(hasher=hasher)
    registry.add(hf_dir, name="hf")
    hasher.take()
    threads = [threading.Thread(target=registry.resolve, args=("hf",)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(hasher.take()) == 5  # one full check; the others waited, then found no change


def test_saves_keep_the_registry_file_mode(gguf_file: Path, registry_path: Path) -> None:
    registry = ModelRegistry.open(registry_path)
    registry.add(gguf_file, name="tiny")
    assert registry_path.stat().st_mode & 0o777 == 0o644
    registry_path.chmod(0o600)
    registry.add_ollama("qwen", "qwen3:0.6b")
    assert registry_path.stat().st_mode & 0o777 == 0o600
