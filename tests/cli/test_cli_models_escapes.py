"""No byte from a signature, a certificate or a model store reaches the terminal as a
control sequence: a key hint, a certificate subject and an Ollama model name holding ESC
sequences are shown escaped (``\\x1b``) in the models commands' output."""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import pytest

from inferactors._cli.models import register_models_commands
from inferactors._errors import one_line, printable
from models.signing_support import (
    craft_bundle,
    make_certified_key,
    make_key,
    oms_sign_certificate,
)
from models.stores_support import pull_into_ollama

FAKE_OK = "\x1b[2J\x1b[H\x1b[32mALL OK\x1b[0m\r"


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def gguf(tmp_path: Path, tiny_gguf: Path) -> Path:
    return Path(shutil.copy2(tiny_gguf, tmp_path / "tiny.gguf"))


def _no_control(text: str) -> None:
    assert "\x1b" not in text
    assert "\r" not in text


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("a\x1b[31mb\u202ec\x85d\u00e9") == "a\\x1b[31mb\\u202ec\\x85d\u00e9"
    assert one_line("x\ny\tz") == "x\\ny\\tz"


def test_a_key_hint_with_escapes_is_shown_escaped(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ops, mallory = make_key(tmp_path / "k", "ops"), make_key(tmp_path / "k", "mallory")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    resources = [{"name": ".", "digest": digest, "algorithm": "sha256"}]
    craft_bundle(mallory.private, resources, Path(f"{gguf}.sig"), hint=FAKE_OK)
    registry = tmp_path / "models.json"

    code = _cli(
        "add", str(gguf), "--name", "a", "--trust-key", str(ops.public), "--registry", str(registry)
    )

    err = capsys.readouterr().err
    assert code == 2
    _no_control(err)
    assert "signed by key sha256:\\x1b[2J\\x1b[H" in err


def test_a_certificate_subject_with_escapes_is_shown_escaped(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = make_certified_key(tmp_path / "pki", "ops", root_name="root")
    theirs = make_certified_key(tmp_path / "pki2", f"ops{FAKE_OK}", root_name="stranger")
    oms_sign_certificate(gguf, Path(f"{gguf}.sig"), theirs)
    registry = tmp_path / "models.json"

    code = _cli(
        "add", str(gguf), "--name", "a", "--trust-root", str(ours.root), "--registry", str(registry)
    )

    err = capsys.readouterr().err
    assert code == 2
    _no_control(err)
    assert "signed by certificate CN=ops\\x1b[2J" in err


def test_an_ollama_name_with_escapes_is_shown_escaped(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "ollama" / "models"
    pull_into_ollama(store, tiny_gguf, "evil\x1b[31mred", "latest")
    registry = tmp_path / "models.json"

    _cli("import", "ollama", str(store), "--registry", str(registry))

    out = capsys.readouterr().out
    _no_control(out)
    assert "evil\\x1b[31mred" in out
