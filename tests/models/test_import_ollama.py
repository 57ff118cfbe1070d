"""``models import ollama`` on a store laid out as Ollama's: the GGUF layer registered under
the Ollama name, pinned by its digest, idempotent, and every hostile manifest skipped with
why and nothing stored for it."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import pytest

from inferactors import ModelRegistry
from inferactors._cli.models import register_models_commands
from inferactors._flavor import ModelFormat
from inferactors._models.import_ollama import OllamaModel, Skipped, find_ollama_models
from models.stores_support import (
    MODEL,
    ollama_manifest,
    pull_into_ollama,
    put_blob,
    write_ollama_manifest,
)


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def store(tmp_path: Path, tiny_gguf: Path) -> Path:
    store = tmp_path / "ollama" / "models"
    pull_into_ollama(store, tiny_gguf, "tiny", "latest")
    pull_into_ollama(store, tiny_gguf, "tiny", "q8", namespace="someone")
    return store


def test_the_model_layer_is_registered_under_the_ollama_name_and_pinned(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"

    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1/2] tiny:latest: registered: gguf, 1 file, 510.1 KiB"
    assert out[1] == "[2/2] someone.tiny:q8: registered: gguf, 1 file, 510.1 KiB"
    assert out[2] == "2 registered, 0 already registered, 0 skipped (nothing downloaded)"
    opened = ModelRegistry.open(registry)
    manifest = opened.get("tiny:latest")
    assert manifest.format is ModelFormat.GGUF
    assert manifest.source.ollama_tag == "tiny:latest"
    assert opened.get("someone.tiny:q8").source.ollama_tag == "someone/tiny:q8"
    (shard,) = manifest.shards
    assert shard.path.startswith("sha256-")
    assert Path(manifest.root) == store / "blobs"
    assert opened.resolve("tiny:latest").shards == (store / "blobs" / shard.path,)


def test_importing_again_changes_nothing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"
    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0
    before = registry.read_bytes()
    capsys.readouterr()

    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "0 registered, 2 already registered, 0 skipped (nothing downloaded)"
    assert registry.read_bytes() == before


def _entries(store: Path) -> dict[str, OllamaModel | Skipped]:
    found = {}
    for item in find_ollama_models(store):
        found[item.name if isinstance(item, OllamaModel) else item.what] = item
    return found


def test_hostile_manifests_are_skipped_with_why(store: Path, tmp_path: Path) -> None:
    good = json.loads(next((store / "manifests").rglob("latest")).read_text())
    layer = good["layers"][0]
    bad = {
        "huge": " " * (2 << 20) + "{}",
        "deep": "[" * 100 + "]" * 100,
        "not-json": "{",
        "wrong-type": {
            **good,
            "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
        },
        "no-model": ollama_manifest(good["layers"][1:]),
        "two-models": ollama_manifest([layer, layer]),
        "bad-digest": ollama_manifest([{**layer, "digest": "sha256:../../etc/passwd"}]),
        "missing-blob": ollama_manifest([{**layer, "digest": "sha256:" + "0" * 64}]),
        "too-many": ollama_manifest([*[good["layers"][1]] * 70, layer]),
        "fifo-blob": ollama_manifest([{**layer, "digest": "sha256:" + "f" * 64}]),
    }
    os.mkfifo(store / "blobs" / ("sha256-" + "f" * 64))
    for tag, body in bad.items():
        write_ollama_manifest(store, "bad", tag, body)
    outside = tmp_path / "outside"
    outside.write_text(json.dumps(good))
    os.symlink(outside, store / "manifests" / "registry.ollama.ai" / "library" / "bad" / "link")

    found = _entries(store)

    def why(tag: str) -> str:
        item = found[f"registry.ollama.ai/library/bad/{tag}"]
        assert isinstance(item, Skipped), item
        return item.why

    assert "larger than its limit of 1 MiB" in why("huge")
    assert "nested deeper than" in why("deep")
    assert "not valid JSON" in why("not-json") or "JSON" in why("not-json")
    assert why("wrong-type").startswith("$.mediaType: ")
    assert why("no-model") == f"$.layers: 0 layers of type {MODEL}, expected one"
    assert why("two-models") == f"$.layers: 2 layers of type {MODEL}, expected one"
    assert why("bad-digest") == "$.layers[0].digest: expected sha256:<64 lower-case hex>"
    assert why("missing-blob") == f"its model blob sha256-{'0' * 64} is missing"
    assert why("fifo-blob") == (
        f"its model blob sha256-{'f' * 64} is not a regular file (a folder, FIFO or device)"
    )
    assert why("too-many").startswith("$.layers: expected a list of at most 64")
    assert why("link") == "a symbolic link, not followed"


def test_a_blob_whose_digest_does_not_match_is_refused_and_nothing_stored(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b"GGUF" + bytes(1000)
    digest = put_blob(store, data)
    blob = store / "blobs" / ("sha256-" + digest.removeprefix("sha256:"))
    blob.write_bytes(b"GGUF" + bytes(999) + b"\x01")  # same size, other bytes
    write_ollama_manifest(
        store,
        "damaged",
        "latest",
        ollama_manifest([{"mediaType": MODEL, "digest": digest, "size": 1004}]),
    )
    linked = put_blob(store, b"GGUF" + bytes(10))
    linked_blob = store / "blobs" / ("sha256-" + linked.removeprefix("sha256:"))
    linked_blob.unlink()
    os.symlink(tmp_path / "elsewhere.gguf", linked_blob)
    write_ollama_manifest(
        store,
        "linked",
        "latest",
        ollama_manifest([{"mediaType": MODEL, "digest": linked, "size": 14}]),
    )
    registry = tmp_path / "models.json"

    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0

    out = capsys.readouterr().out
    assert "damaged:latest: skipped: sha256-" in out
    assert "its SHA-256 is not its name (a damaged blob)" in out
    assert f"linked/latest: skipped: its model blob {linked_blob.name} is a symbolic link" in out
    assert sorted(m.name for m in ModelRegistry.open(registry).list()) == [
        "someone.tiny:q8",
        "tiny:latest",
    ]


def test_a_folder_that_is_not_a_store_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli("import", "ollama", str(tmp_path), "--registry", str(tmp_path / "m.json")) == 2
    assert "not an Ollama model store (manifests/ is missing" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_an_adapter_or_projector_layer_is_said_to_be_left_out(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "ollama" / "models"
    data = tiny_gguf.read_bytes()
    layers: list[dict[str, object]] = [
        {"mediaType": MODEL, "digest": put_blob(store, data), "size": len(data)}
    ]
    for kind in ("projector", "adapter"):
        layers.append(
            {
                "mediaType": f"application/vnd.ollama.image.{kind}",
                "digest": put_blob(store, f"GGUF {kind}".encode()),
                "size": 10,
            }
        )
    write_ollama_manifest(store, "llava", "latest", ollama_manifest(layers))

    assert _cli("import", "ollama", str(store), "--registry", str(tmp_path / "m.json")) == 0

    out = capsys.readouterr().out
    assert "llava:latest: not carried: its adapter and projector layers (only the weights" in out


def test_a_tag_pulled_again_is_kept_as_registered_naming_both_digests_unless_updated(
    store: Path, tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"
    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0
    old = ModelRegistry.open(registry).get("tiny:latest").shards[0].path
    newer = tmp_path / "newer.gguf"
    newer.write_bytes(tiny_gguf.read_bytes() + b"\0")
    pull_into_ollama(store, newer, "tiny", "latest")  # `ollama pull tiny` after an update
    new = "sha256-" + hashlib.sha256(newer.read_bytes()).hexdigest()
    before = registry.read_bytes()
    capsys.readouterr()

    assert _cli("import", "ollama", str(store), "--registry", str(registry)) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"[1/2] tiny:latest: skipped: Ollama's tiny:latest is now {new}, registered is {old} "
        "(an earlier pull): kept as registered; --update registers the new weights"
    )
    assert registry.read_bytes() == before

    assert _cli("import", "ollama", str(store), "--registry", str(registry), "--update") == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"[1/2] tiny:latest: updated: gguf, 1 file, 510.1 KiB, was {old}"
    assert out[-1] == (
        "0 registered, 1 already registered, 1 updated, 0 skipped (nothing downloaded)"
    )
    opened = ModelRegistry.open(registry)
    assert [f.path for f in opened.get("tiny:latest").shards] == [new]
    assert opened.resolve("tiny:latest").shards == (store / "blobs" / new,)
