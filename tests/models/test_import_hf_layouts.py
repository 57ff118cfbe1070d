"""``models import hf-cache`` on the layouts real caches hold beyond one GGUF file at the top
of a snapshot that ``refs/main`` names: a GGUF file in a subfolder, a repository without
``refs/main``, two organisations' repositories of one name, a GGUF file's detached
signature beside it, and weights in formats no server here loads."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pytest

from inferactors import ModelRegistry
from inferactors._cli.models import register_models_commands
from models.signing_support import KeyPair, oms_sign
from models.stores_support import cache_repo, mlx_files

OLD, NEW = "1" * 40, "2" * 40


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


def _import(cache: Path, registry: Path, *more: str) -> int:
    return _cli("import", "hf-cache", str(cache), "--registry", str(registry), *more)


def test_a_gguf_file_in_a_snapshot_subfolder_is_registered_pinned_beneath_the_snapshot(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    snapshot = cache_repo(cache, "org/Quants-GGUF", {"Q8_0/tiny.gguf": tiny_gguf})

    assert _import(cache, registry) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1/1] org.Quants-GGUF:Q8_0.tiny: registered: gguf, 1 file, 510.1 KiB"
    opened = ModelRegistry.open(registry)
    manifest = opened.get("org.Quants-GGUF:Q8_0.tiny")
    assert manifest.root == str(snapshot)
    assert [f.path for f in manifest.shards] == ["Q8_0/tiny.gguf"]
    assert opened.resolve("org.Quants-GGUF:Q8_0.tiny").shards == (snapshot / "Q8_0/tiny.gguf",)


def test_without_refs_main_the_newest_snapshot_is_imported_and_said(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    old = cache_repo(cache, "org/Tiny-GGUF", {"tiny.gguf": tiny_gguf}, revision=OLD)
    new = cache_repo(cache, "org/Tiny-GGUF", {"tiny.gguf": tiny_gguf}, revision=NEW)
    (cache / "models--org--Tiny-GGUF" / "refs" / "main").unlink()
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))

    assert _import(cache, registry) == 0

    assert capsys.readouterr().out.splitlines() == [
        "[1/2] org/Tiny-GGUF@11111111: skipped: not imported: older than 22222222, imported",
        "[2/2] org.Tiny-GGUF:tiny: registered: gguf, 1 file, 510.1 KiB",
        "org.Tiny-GGUF:tiny: no refs/main: imported the newest of its 2 snapshots, 22222222 "
        "(models add PATH registers another snapshot)",
        "1 registered, 0 already registered, 1 skipped (nothing downloaded)",
    ]
    manifest = ModelRegistry.open(registry).get("org.Tiny-GGUF:tiny")
    assert manifest.source.hf_revision == NEW
    assert manifest.root == str(new)


def test_a_refs_main_that_names_no_commit_is_said_and_its_snapshot_imported(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    cache_repo(cache, "org/Tiny-GGUF", {"tiny.gguf": tiny_gguf}, revision=NEW)
    (cache / "models--org--Tiny-GGUF" / "refs" / "main").write_text("../../../../etc")

    assert _import(cache, registry) == 0

    assert capsys.readouterr().out.splitlines()[1] == (
        "org.Tiny-GGUF:tiny: refs/main is not a commit hash: imported its snapshot, 22222222 "
        "(models add PATH registers another snapshot)"
    )
    assert ModelRegistry.open(registry).get("org.Tiny-GGUF:tiny").source.hf_revision == NEW


def test_two_organisations_repositories_of_one_name_get_two_names(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    cache_repo(cache, "TheBloke/Tiny-GGUF", {"tiny.gguf": tiny_gguf})
    cache_repo(cache, "mallory/Tiny-GGUF", {"tiny.gguf": tiny_gguf.read_bytes() + b"\0"})

    assert _import(cache, registry) == 0

    out = capsys.readouterr().out
    assert "[1/2] TheBloke.Tiny-GGUF:tiny: registered: gguf, 1 file, 510.1 KiB" in out
    assert "[2/2] mallory.Tiny-GGUF:tiny: registered: gguf, 1 file, 510.1 KiB" in out
    opened = ModelRegistry.open(registry)
    theirs, mallorys = opened.get("TheBloke.Tiny-GGUF:tiny"), opened.get("mallory.Tiny-GGUF:tiny")
    assert theirs.source.hf_repo == "TheBloke/Tiny-GGUF"
    assert mallorys.source.hf_repo == "mallory/Tiny-GGUF"
    assert theirs.shards[0].blake3 != mallorys.shards[0].blake3


@pytest.fixture
def signed_gguf_cache(tmp_path: Path, tiny_gguf: Path, ops: KeyPair) -> Path:
    """A repository holding a GGUF file and its OMS signature beside it (``FILE.gguf.sig``,
    as ``models sign`` names it), signed by ``ops``; and a subfolder GGUF with a
    ``model.sig`` in its folder."""
    signing = tmp_path / "signing"
    signing.mkdir()
    gguf = Path(shutil.copy2(tiny_gguf, signing / "tiny.gguf"))
    signature = oms_sign(gguf, signing / "tiny.gguf.sig", ops.private, algorithm="blake3")
    cache = tmp_path / "hub"
    files: dict[str, Path | bytes] = {
        "tiny.gguf": tiny_gguf,
        "tiny.gguf.sig": signature.read_bytes(),
        "Q8_0/tiny.gguf": tiny_gguf,
        "Q8_0/model.sig": signature.read_bytes(),
    }
    cache_repo(cache, "ops/tiny-GGUF", files)
    return cache


def test_a_signature_beside_a_gguf_file_is_verified(
    signed_gguf_cache: Path, tmp_path: Path, ops: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"

    assert _import(signed_gguf_cache, registry, "--trust-key", str(ops.public)) == 0

    out = capsys.readouterr().out
    assert "ops.tiny-GGUF:tiny: registered: gguf, 1 file, 510.1 KiB, signed by ops" in out
    assert "ops.tiny-GGUF:Q8_0.tiny: registered: gguf, 1 file, 510.1 KiB, signed by ops" in out
    opened = ModelRegistry.open(registry)
    signature = opened.get("ops.tiny-GGUF:tiny").signature
    assert signature is not None
    assert signature.file.path == "tiny.gguf.sig"
    assert opened.signed_by(opened.get("ops.tiny-GGUF:Q8_0.tiny")) is not None


def test_a_signature_beside_a_gguf_file_by_a_stranger_refuses_it(
    signed_gguf_cache: Path, tmp_path: Path, stranger: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"

    assert _import(signed_gguf_cache, registry, "--trust-key", str(stranger.public)) == 0

    out = capsys.readouterr().out
    assert "ops.tiny-GGUF:tiny: skipped: signature: tiny.gguf.sig: does not verify" in out
    assert "ops.tiny-GGUF:Q8_0.tiny: skipped: signature: Q8_0/model.sig: does not verify" in out
    assert ModelRegistry.open(registry).list() == ()


def test_a_signature_beside_a_gguf_file_without_anchors_is_named_and_left_out(
    signed_gguf_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"

    assert _import(signed_gguf_cache, registry) == 0

    err = capsys.readouterr().err
    assert "tiny.gguf.sig not checked: no trust anchor given" in err
    assert "registering ops.tiny-GGUF:tiny unsigned" in err
    assert ModelRegistry.open(registry).get("ops.tiny-GGUF:tiny").signature is None


def test_weights_no_server_here_loads_are_skipped_each_with_why(
    tmp_path: Path, tiny_gguf: Path, tiny_mlx_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    torch = {"config.json": b"{}", "pytorch_model.bin": b"\0" * 8, "README.md": b"# t"}
    cache_repo(cache, "org/torch-only", torch)
    mixed = {**mlx_files(tiny_mlx_model), "onnx/model.onnx": b"onnx", "x/w.safetensors": b"s"}
    cache_repo(cache, "org/mixed", mixed)

    assert _import(cache, registry) == 0

    assert capsys.readouterr().out.splitlines() == [
        "[1/5] org.mixed: registered: mlx, 4 files, 579.9 KiB",
        "[2/5] org/mixed@aaaaaaaa/onnx/model.onnx: skipped: ONNX weights, not a format "
        "llama-server (GGUF) or mlx_lm.server (safetensors with a config.json) loads",
        "[3/5] org/mixed@aaaaaaaa/x/w.safetensors: skipped: safetensors weights in a "
        "subfolder: not a model folder mlx_lm.server loads",
        "[4/5] org/torch-only@aaaaaaaa/pytorch_model.bin: skipped: PyTorch weights, not a "
        "format llama-server (GGUF) or mlx_lm.server (safetensors with a config.json) loads",
        "[5/5] org/torch-only@aaaaaaaa: skipped: no GGUF file and no safetensors weights "
        "with a config.json",
        "1 registered, 0 already registered, 4 skipped (nothing downloaded)",
    ]


def test_a_repository_updated_since_its_import_is_kept_as_registered_naming_both_revisions(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, registry = tmp_path / "hub", tmp_path / "models.json"
    cache_repo(cache, "org/Tiny-GGUF", {"tiny.gguf": tiny_gguf}, revision=OLD)
    assert _import(cache, registry) == 0
    before = registry.read_bytes()
    newer = tiny_gguf.read_bytes() + b"\0"
    cache_repo(cache, "org/Tiny-GGUF", {"tiny.gguf": newer}, revision=NEW)  # refs/main moves
    capsys.readouterr()

    assert _import(cache, registry) == 0

    assert capsys.readouterr().out.splitlines()[1] == (
        "[2/2] org.Tiny-GGUF:tiny: skipped: org/Tiny-GGUF is now at 22222222, registered is "
        "11111111 (an earlier snapshot): kept as registered; models remove it, then import again"
    )
    assert registry.read_bytes() == before
