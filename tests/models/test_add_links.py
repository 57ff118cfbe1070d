"""``models add`` reads a signature and a linked ``.gguf`` as every later check does: a
signature linked out of the model's root or a special file at its name is refused (not
accepted at add and failed at verify, nor skipped in silence), a ``.gguf`` link to a
file with another name is a GGUF model, and a ``.gguf`` name for a file that is not GGUF
is refused."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pytest

from inferactors import ModelRegistry
from inferactors._cli.models import register_models_commands
from inferactors._flavor import ModelFormat
from models.signing_support import KeyPair, make_key, oms_sign


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def keys(tmp_path: Path) -> KeyPair:
    return make_key(tmp_path / "keys", "ops")


@pytest.fixture
def gguf(tmp_path: Path, tiny_gguf: Path) -> Path:
    (tmp_path / "m").mkdir()
    return Path(shutil.copy2(tiny_gguf, tmp_path / "m" / "tiny.gguf"))


def _add(model: Path, keys: KeyPair, registry: Path) -> int:
    return _cli(
        "add",
        str(model),
        "--name",
        "a",
        "--trust-key",
        str(keys.public),
        "--registry",
        str(registry),
    )


def test_a_signature_linked_out_of_the_root_is_refused_at_add(
    gguf: Path, keys: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = oms_sign(gguf, tmp_path / "outside.sig", keys.private)
    Path(f"{gguf}.sig").symlink_to(outside)
    registry = tmp_path / "models.json"

    assert _add(gguf, keys, registry) == 2

    err = capsys.readouterr().err
    assert "signature: tiny.gguf.sig: resolves to " in err
    assert "outside the model root" in err
    assert not registry.exists()


def test_a_fifo_at_the_signature_name_is_refused_not_skipped(
    gguf: Path, keys: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(f"{gguf}.sig")
    registry = tmp_path / "models.json"

    assert _add(gguf, keys, registry) == 2

    err = capsys.readouterr().err
    assert "signature: tiny.gguf.sig: the signature is not a regular file" in err
    assert not registry.exists()


def test_a_gguf_link_is_gguf_and_a_gguf_name_on_another_file_is_refused(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = gguf.rename(gguf.with_name("sha256-0123"))  # as Ollama names its blobs
    linked = tmp_path / "linked.gguf"
    linked.symlink_to(blob)
    text = tmp_path / "shadow"
    text.write_text("root:*:19000:0:99999:7:::\n")
    fake = tmp_path / "fake.gguf"
    fake.symlink_to(text)
    registry = tmp_path / "models.json"

    assert _cli("add", str(linked), "--name", "linked", "--registry", str(registry)) == 0
    assert ModelRegistry.open(registry).get("linked").format is ModelFormat.GGUF

    assert _cli("add", str(fake), "--name", "fake", "--registry", str(registry)) == 2
    err = capsys.readouterr().err
    assert f"path: {fake} (a link to {text}) is not a GGUF file" in err
    assert [m.name for m in ModelRegistry.open(registry).list()] == ["linked"]
