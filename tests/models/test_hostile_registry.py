"""Registry files and model directories written to break the reader: a nesting bomb, a key
twice in one manifest, a 5,000-digit size. Each is `InvalidConfig` naming the file and the
line or JSON path, never a RecursionError or ValueError; a registry that cannot be read is
never overwritten, so nothing already stored is lost. A model directory whose
``config.json`` or safetensors header is a bomb still registers (the format hint is only a
hint).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from inferactors._errors import InvalidConfig
from inferactors._flavor import ModelFormat
from inferactors._models.registry import ModelRegistry
from inferactors._models.registry_file import read_registry
from models.registry_support import CountingHasher

SCHEMA = "inferactors.model-registry.v1"
MANIFEST = (
    '{"name": "tiny", "format": "gguf", "root": "/m", '
    '"shards": [{"path": "tiny.gguf", "size": SIZE, "blake3": "' + "0" * 64 + '"}]}'
)


def registry_text(manifest: str = MANIFEST.replace("SIZE", "12")) -> str:
    return f'{{"schema": "{SCHEMA}", "models": [{manifest}]}}'


HOSTILE = [
    pytest.param(
        "[" * 100_000 + "]" * 100_000,
        "JSON nested deeper than 64 levels at line 1, column 65",
        id="nesting-bomb",
    ),
    pytest.param(
        registry_text(MANIFEST.replace("SIZE", "12").replace('"root"', '"name": "x", "root"')),
        '$.models[0]: the object has the key "name" twice',
        id="duplicate-key",
    ),
    pytest.param(
        registry_text(MANIFEST.replace("SIZE", "9" * 5000)),
        "$.models[0].shards[0].size: an integer of 5000 digits (at most 100)",
        id="5000-digits",
    ),
    pytest.param(
        f'{{"schema": "{SCHEMA}", "models": [], "schema": "{SCHEMA}"}}',
        '$: the object has the key "schema" twice',
        id="duplicate-top-level-key",
    ),
]


@pytest.mark.parametrize(("text", "why"), HOSTILE)
def test_a_hostile_registry_is_refused_naming_file_and_where(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "models.json"
    path.write_text(text)
    with pytest.raises(InvalidConfig) as caught:
        ModelRegistry.open(path)
    assert str(caught.value) == f"{path}: {why}"
    with pytest.raises(InvalidConfig, match="^" + re.escape(str(path))):
        read_registry(path)


@pytest.mark.parametrize(("text", "why"), HOSTILE)
def test_a_registry_turned_hostile_is_never_overwritten(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "models.json"
    registry = ModelRegistry.open(path)
    registry.add_ollama("kept", "kept:latest")
    path.write_text(text)  # someone else's editor, a bad merge, an attacker
    with pytest.raises(InvalidConfig, match=re.escape(why)):
        registry.add_ollama("more", "more:latest")
    assert path.read_text() == text
    with pytest.raises(InvalidConfig, match=re.escape(why)):
        registry.remove("kept")
    assert path.read_text() == text


def test_the_text_that_was_there_survives_a_refused_add(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    good = registry_text()
    path.write_text(good)
    registry = ModelRegistry.open(path)
    assert [m.name for m in registry.list()] == ["tiny"]
    bad = good.replace('"size": 12', '"size": 12, "size": 13')
    path.write_text(bad)
    with pytest.raises(InvalidConfig, match=r'shards\[0\]: the object has the key "size" twice'):
        registry.add_ollama("other", "other:latest")
    path.write_text(good)  # once repaired, every entry is still there
    assert [m.name for m in ModelRegistry.open(path).list()] == ["tiny"]


def test_a_bomb_in_config_json_or_a_safetensors_header_does_not_stop_registration(
    tmp_path: Path, hasher: CountingHasher
) -> None:
    root = tmp_path / "model"
    root.mkdir()
    header = b"[" * 100_000 + b"]" * 100_000
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (root / "config.json").write_text(json.dumps({"x": 1})[:-1] + ', "x": 2}')  # key twice
    registry = ModelRegistry.open(tmp_path / "models.json", hasher=hasher)
    manifest = registry.add(root, name="bombed")
    assert manifest.format is ModelFormat.SAFETENSORS  # no hint could be read: the default
    (root / "config.json").write_text('{"quantization": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert registry.add(root, name="bombed-again").format is ModelFormat.SAFETENSORS
