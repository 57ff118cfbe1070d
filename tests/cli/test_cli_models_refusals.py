"""``models sign`` writes only a new file of its own, and the models commands refuse what
they cannot use in one line, never a traceback: a key OpenSSF Model Signing does not sign
with, a draft in a missing folder, a signed name with a NUL, Ctrl-C."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from inferactors import ModelRegistry
from inferactors._cli.models import register_models_commands
from models.signing_support import KeyPair, craft_bundle, make_certified_key, make_key, oms_verify


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


@pytest.fixture
def mlx(tmp_path: Path, tiny_mlx_model: Path) -> Path:
    return Path(shutil.copytree(tiny_mlx_model, tmp_path / "mlx"))


def test_sign_never_writes_through_a_link_planted_at_the_signature(
    gguf: Path, keys: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT DATA")
    Path(f"{gguf}.sig").symlink_to(victim)

    assert _cli("sign", str(gguf), "--private-key", str(keys.private)) == 2

    assert victim.read_text() == "IMPORTANT DATA"
    assert Path(f"{gguf}.sig").is_symlink()
    assert "is a symbolic link: never written through" in capsys.readouterr().err


def test_sign_refuses_a_special_file_or_a_model_file_as_its_target(
    gguf: Path, mlx: Path, keys: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (mlx / "config.json").read_bytes()
    key = ["--private-key", str(keys.private)]
    assert _cli("sign", str(mlx), *key, "--signature", str(mlx / "config.json")) == 2
    assert "is a file of the model (not a signature)" in capsys.readouterr().err
    assert (mlx / "config.json").read_bytes() == config

    assert _cli("sign", str(gguf), *key, "--signature", str(gguf)) == 2
    assert "is the model file itself" in capsys.readouterr().err
    os.mkfifo(gguf.with_name("fifo.sig"))
    assert _cli("sign", str(gguf), *key, "--signature", str(gguf.with_name("fifo.sig"))) == 2
    assert "is not a regular file" in capsys.readouterr().err


def test_sign_replaces_its_own_signature_with_a_new_file(
    mlx: Path, keys: KeyPair, tmp_path: Path
) -> None:
    key = ["--private-key", str(keys.private)]
    assert _cli("sign", str(mlx), *key) == 0
    first = (mlx / "model.sig").stat()
    other = make_key(tmp_path / "keys", "other")
    assert _cli("sign", str(mlx), "--private-key", str(other.private)) == 0

    second = (mlx / "model.sig").stat()
    assert second.st_ino != first.st_ino  # renamed over, not written in place
    assert second.st_mode & 0o777 == 0o644
    oms_verify(mlx, mlx / "model.sig", other.public)  # the old signature was not signed
    assert [p.name for p in mlx.iterdir() if p.name.endswith(".tmp")] == []


def _key_file(path: Path, key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def test_sign_refuses_keys_model_signing_does_not_sign_with(
    gguf: Path, keys: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ed = _key_file(tmp_path / "ed.key", ed25519.Ed25519PrivateKey.generate())
    big = _key_file(tmp_path / "rsa.key", rsa.generate_private_key(65537, 2048))
    private = serialization.load_pem_private_key(keys.private.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    for key, words in (
        (ed, "--private-key: an Ed25519 key: OpenSSF Model Signing signs with elliptic-curve"),
        (big, "--private-key: an RSA key (2048 bits): "),
        (locked, "--private-key: the key is encrypted"),
    ):
        assert _cli("sign", str(gguf), "--private-key", str(key)) == 2
        err = capsys.readouterr().err
        assert words in err
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    assert not Path(f"{gguf}.sig").exists()

    signer = make_certified_key(tmp_path / "pki", "ops@corp.example", root_name="root")
    options = ["--private-key", str(signer.key), "--certificate", str(signer.certificate)]
    assert _cli("sign", str(gguf), *options) == 2
    assert "--chain: signing with --certificate needs its issuers" in capsys.readouterr().err
    wrong = ["--private-key", str(keys.private), "--certificate", str(signer.certificate)]
    assert _cli("sign", str(gguf), *wrong, "--chain", str(signer.root)) == 2
    assert "--certificate: it certifies another key" in capsys.readouterr().err


def test_a_draft_in_a_missing_folder_registers_nothing(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "swap.yaml"
    config.write_text(f"models:\n  a:\n    cmd: llama-server -m {gguf}\n")
    registry = tmp_path / "models.json"
    draft = tmp_path / "missing" / "x.toml"

    code = _cli(
        "import", "llama-swap", str(config), "--draft", str(draft), "--registry", str(registry)
    )

    assert code == 2
    assert "its folder" in capsys.readouterr().err
    assert not registry.exists()


def test_a_signed_name_with_a_nul_is_refused_in_words(
    mlx: Path, keys: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources = [
        {
            "name": p.name,
            "digest": hashlib.sha256(p.read_bytes()).hexdigest(),
            "algorithm": "sha256",
        }
        for p in sorted(mlx.iterdir())
    ]
    resources.append(
        {"name": "config.json\x00x", "digest": resources[0]["digest"], "algorithm": "sha256"}
    )
    craft_bundle(keys.private, resources, mlx / "model.sig")
    registry = tmp_path / "models.json"

    code = _cli(
        "add", str(mlx), "--name", "n", "--trust-key", str(keys.public), "--registry", str(registry)
    )

    assert code == 2
    assert "it signs 'config.json\\x00x', not a path beneath it" in capsys.readouterr().err
    assert ModelRegistry.open(registry).list() == ()


def test_ctrl_c_while_hashing_exits_130_in_one_line_and_stores_nothing(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    big = tmp_path / "big.gguf"
    shutil.copy2(tiny_gguf, big)
    os.truncate(big, 64 << 30)  # sparse: hashing takes far longer than the test waits
    registry = tmp_path / "models.json"
    command = [sys.executable, "-m", "inferactors._cli.main", "models", "add", str(big)]
    command += ["--name", "big", "--registry", str(registry)]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as process:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        seen = ""
        while "hashing big.gguf" not in seen and time.monotonic() < deadline:
            seen += process.stderr.read(1)
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(timeout=30)

    assert code == 130
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1].startswith("inferactors: interrupted: nothing half-saved")
    assert not registry.exists()
