"""``models sign`` and ``models add --signature`` against the ``model_signing`` tool itself,
in both directions, and the trust options (``--trust-key``, ``--trust-root``, ``--config``)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inferactors import ModelRegistry
from inferactors._cli.models import register_models_commands
from models.signing_support import KeyPair, make_certified_key, make_key, oms_verify


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


def _tool(*argv: str) -> subprocess.CompletedProcess[str]:
    """The ``model_signing`` program of the ``model-signing`` package."""
    command = [sys.executable, "-m", "model_signing", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


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


@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
def test_what_models_sign_writes_the_model_signing_tool_verifies(
    gguf: Path, mlx: Path, keys: KeyPair, algorithm: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--private-key", str(keys.private), "--hashing-algorithm", algorithm]
    assert _cli("sign", str(gguf), *options) == 0
    assert _cli("sign", str(mlx), *options) == 0
    out = capsys.readouterr().out
    assert f"signed {gguf}: {gguf}.sig ({algorithm}, key sha256:" in out

    for model, signature in ((gguf, Path(f"{gguf}.sig")), (mlx, mlx / "model.sig")):
        if algorithm == "blake3":  # its command checks SHA-256 only; its library guesses
            oms_verify(model, signature, keys.public)
            continue
        done = _tool("verify", "key", "--public_key", str(keys.public), "--signature",
                     str(signature), str(model))  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Verification succeeded" in done.stdout


def test_a_certificate_signature_from_models_sign_verifies_with_the_tool(
    gguf: Path, tmp_path: Path
) -> None:
    pki = make_certified_key(tmp_path / "pki", "ops@example.org", root_name="root")
    argv = ["sign", str(gguf), "--private-key", str(pki.key), "--certificate",
            str(pki.certificate), "--chain", str(pki.root)]  # fmt: skip
    assert _cli(*argv) == 0

    done = _tool("verify", "certificate", "--certificate_chain", str(pki.root),
                 "--signature", f"{gguf}.sig", str(gguf))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_signature_the_tool_made_is_verified_by_models_add(
    mlx: Path, tmp_path: Path, keys: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    signature = mlx / "model.sig"
    done = _tool("sign", "key", "--private_key", str(keys.private), "--signature",
                 str(signature), str(mlx))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    registry = tmp_path / "models.json"

    code = _cli("add", str(mlx), "--name", "tiny", "--registry", str(registry),
                "--trust-key", str(keys.public))  # fmt: skip

    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[-1].startswith("signed by ops: key sha256:")
    manifest = ModelRegistry.open(registry).get("tiny")
    assert manifest.signature is not None
    assert manifest.signature.algorithm == "sha256"  # the tool's default


def test_a_signature_beside_the_model_with_no_anchor_is_named_and_left_out(
    gguf: Path, tmp_path: Path, keys: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli("sign", str(gguf), "--private-key", str(keys.private)) == 0
    registry = tmp_path / "models.json"

    assert _cli("add", str(gguf), "--name", "tiny", "--registry", str(registry)) == 0

    err = capsys.readouterr().err
    assert f"note: {gguf}.sig not checked: no trust anchor given" in err
    assert ModelRegistry.open(registry).get("tiny").signature is None


def test_unsigned_skips_a_signature_that_does_not_verify(
    gguf: Path, tmp_path: Path, keys: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    mallory = make_key(tmp_path / "keys", "mallory")
    assert _cli("sign", str(gguf), "--private-key", str(mallory.private)) == 0
    registry = tmp_path / "models.json"
    add = ["add", str(gguf), "--name", "tiny", "--registry", str(registry),
           "--trust-key", str(keys.public)]  # fmt: skip

    assert _cli(*add) == 2
    assert "--unsigned skips it" in capsys.readouterr().err
    assert _cli(*add, "--unsigned") == 0
    assert ModelRegistry.open(registry).get("tiny").signature is None


def test_the_run_file_names_the_registry_and_the_anchors(
    gguf: Path, tmp_path: Path, keys: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli("sign", str(gguf), "--private-key", str(keys.private)) == 0
    shutil.copy2(keys.public, tmp_path / "ops.pub")
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        '[managed]\nregistry = "reg/models.json"\ndata_root = "state"\n'
        'trust_anchors = [{ name = "operators", public_key = "ops.pub" }]\n'
    )

    assert _cli("add", str(gguf), "--name", "tiny", "--config", str(run_file)) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("signed by operators: key")
    assert _cli("verify", "--config", str(run_file)) == 0
    assert "ok      tiny: 1 file verified, signed by operators: key sha256:" in (
        capsys.readouterr().out
    )


def test_bad_sign_input_is_refused_naming_the_option(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.key"
    junk.write_text("not a key")
    assert _cli("sign", str(gguf), "--private-key", str(junk)) == 2
    assert "inferactors: error: --private-key: " in capsys.readouterr().err
    assert _cli("sign", str(gguf), "--private-key", str(tmp_path)) == 2
    assert "--private-key: " in capsys.readouterr().err
    assert _cli("sign", str(tmp_path / "nothing"), "--private-key", str(junk)) == 2
    assert "path: " in capsys.readouterr().err
    assert not Path(f"{gguf}.sig").exists()
