"""``models import hf-cache`` on a cache laid out as huggingface_hub writes it, and
``models import llama-swap`` on a config with macros and groups: what is registered, what
is drafted and carried, what is skipped and why, and that a second import changes nothing."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pytest

from inferactors import ModelRegistry, load_run_config
from inferactors._cli.models import register_models_commands
from inferactors._flavor import ModelFormat
from models.signing_support import KeyPair, oms_sign
from models.stores_support import cache_repo, mlx_files

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def cache(tmp_path: Path, tiny_gguf: Path, tiny_mlx_model: Path) -> Path:
    cache = tmp_path / "hf" / "hub"
    cache_repo(cache, "someone/Tiny-GGUF", {"tiny-Q8_0.gguf": tiny_gguf, "README.md": b"# tiny"})
    cache_repo(cache, "mlx-community/tiny-4bit", mlx_files(tiny_mlx_model), revision=REVISION)
    split = {"big-00001-of-00002.gguf": b"GGUF1", "big-00002-of-00002.gguf": b"GGUF2"}
    cache_repo(cache, "someone/Big-GGUF", split)
    partial = cache_repo(cache, "someone/Partial-GGUF", {"p.gguf": b"GGUF"})
    os.unlink(os.path.realpath(partial / "p.gguf"))  # an unfinished download
    (cache / "datasets--someone--data").mkdir()
    (cache / ".locks").mkdir()
    return cache


def test_a_cache_imports_its_gguf_files_and_mlx_folders_and_skips_with_why(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"

    assert _cli("import", "hf-cache", str(cache), "--registry", str(registry)) == 0

    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[1/4] mlx-community.tiny-4bit: registered: mlx, 4 files, 579.9 KiB",
        "[2/4] someone/Big-GGUF@aaaaaaaa/big-00001-of-00002.gguf: skipped: a split GGUF in 2 "
        "parts: register its folder with models add",
        "[3/4] someone/Partial-GGUF@aaaaaaaa: skipped: unfinished download: p.gguf not in "
        "blobs/ yet",
        "[4/4] someone.Tiny-GGUF:tiny-Q8_0: registered: gguf, 1 file, 510.1 KiB",
        "2 registered, 0 already registered, 2 skipped (nothing downloaded)",
    ]


def test_the_mlx_folder_is_one_model_pinned_through_the_snapshot_links(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"
    assert _cli("import", "hf-cache", str(cache), "--registry", str(registry)) == 0
    out = capsys.readouterr().out

    assert "mlx-community.tiny-4bit: registered: mlx, 4 files" in out
    opened = ModelRegistry.open(registry)
    mlx = opened.get("mlx-community.tiny-4bit")
    assert mlx.format is ModelFormat.MLX
    assert mlx.source.hf_repo == "mlx-community/tiny-4bit"
    assert mlx.source.hf_revision == REVISION
    assert mlx.root.endswith(f"snapshots/{REVISION}")
    opened.resolve("mlx-community.tiny-4bit")  # every link leads into the repository's blobs/
    gguf = opened.get("someone.Tiny-GGUF:tiny-Q8_0")
    assert gguf.source.hf_repo == "someone/Tiny-GGUF"
    opened.resolve("someone.Tiny-GGUF:tiny-Q8_0")


def test_a_second_cache_import_changes_nothing(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = tmp_path / "models.json"
    assert _cli("import", "hf-cache", str(cache), "--registry", str(registry)) == 0
    before = registry.read_bytes()
    capsys.readouterr()

    assert _cli("import", "hf-cache", str(cache), "--registry", str(registry)) == 0

    assert capsys.readouterr().out.splitlines()[-1] == (
        "0 registered, 2 already registered, 2 skipped (nothing downloaded)"
    )
    assert registry.read_bytes() == before


def test_a_signed_snapshot_is_verified_and_a_link_out_of_the_repository_refused(
    tmp_path: Path, tiny_mlx_model: Path, ops: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    signed_copy = Path(shutil.copytree(tiny_mlx_model, tmp_path / "signed"))
    signature = oms_sign(signed_copy, signed_copy / "model.sig", ops.private, algorithm="blake3")
    cache = tmp_path / "hub"
    files = {**mlx_files(tiny_mlx_model), "model.sig": signature.read_bytes()}
    cache_repo(cache, "ops/tiny-signed", files)
    escaping = cache_repo(cache, "evil/tiny", mlx_files(tiny_mlx_model))
    (escaping / "config.json").unlink()
    os.symlink(tmp_path / "signed" / "config.json", escaping / "config.json")
    registry = tmp_path / "models.json"

    argv = ["import", "hf-cache", str(cache), "--registry", str(registry)]
    assert _cli(*argv, "--trust-key", str(ops.public)) == 0

    out = capsys.readouterr().out
    assert "] ops.tiny-signed: registered: mlx, 4 files, " in out
    assert out.count(", signed by ops") == 1
    assert "[1/2] evil.tiny: skipped: path: config.json resolves to" in out
    assert [m.name for m in ModelRegistry.open(registry).list()] == ["ops.tiny-signed"]


SWAP_CONFIG = """
healthCheckTimeout: 60
startPort: 9100
macros:
  "server": "{server} --port ${{PORT}}"
  "default_ctx": 2048
  "common": "--ctx-size ${{default_ctx}} --threads 2"
models:
  "tiny":
    cmd: |
      # the tiny model, as llama-swap runs it
      ${{server}}
      -m tiny.gguf
      ${{common}}
      -ngl 99
      --no-such-flag 7
    ttl: 300
    aliases: ["small"]
  "tiny-long":
    macros:
      "default_ctx": 8192
    cmd: ${{server}} --model {absolute} ${{common}} -ctk q8_0 -ctv q8_0
  "fixed-port":
    proxy: http://127.0.0.1:9100
    cmd: {server} -m tiny.gguf --port 9100 --host 0.0.0.0
  "in-docker":
    cmd: docker run --rm -p ${{PORT}}:8080 ghcr.io/ggml-org/llama.cpp:server -m /models/x.gguf
  "unset-env":
    cmd: ${{server}} -m ${{env.INFERACTORS_TEST_NOT_SET}}/x.gguf
groups:
  "together":
    swap: false
    members: ["tiny", "tiny-long"]
"""


def test_a_llama_swap_config_registers_its_models_and_drafts_a_run_file(
    tmp_path: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "swap"
    folder.mkdir()
    shutil.copy2(tiny_gguf, folder / "tiny.gguf")
    other = Path(shutil.copy2(tiny_gguf, tmp_path / "tiny-long.gguf"))
    config = folder / "config.yaml"
    config.write_text(SWAP_CONFIG.format(server="/opt/llama/llama-server", absolute=other))
    registry, draft = tmp_path / "models.json", tmp_path / "draft.toml"
    argv = ["import", "llama-swap", str(config), "--registry", str(registry), "--draft", str(draft)]

    assert _cli(*argv) == 0

    out = capsys.readouterr().out
    assert "[1/5] models.in-docker: skipped: cmd runs docker, not llama-server" in out
    assert (
        "models.unset-env: skipped: models.unset-env.cmd: ${env.INFERACTORS_TEST_NOT_SET}: " in out
    )
    assert "fixed-port: registered: gguf, 1 file, 510.1 KiB" in out
    assert "models.tiny: not carried: ttl: no idle unload for llama.cpp instances" in out
    assert "models.tiny: not carried: --no-such-flag 7: " in out
    assert "models.fixed-port: not carried: --host 0.0.0.0: only loopback binds are managed" in out
    assert "models.fixed-port: not carried: --port 9100: another drafted instance has it" not in out
    assert "groups.together (members tiny, tiny-long): not carried" in out
    assert f"drafted 3 instances in {draft}" in out
    run = load_run_config(draft)
    specs = {i.spec.role: i.spec for i in run.instances}
    assert specs["tiny"].serve.ctx == 2048
    assert specs["tiny"].serve.extra_args == ("--threads", "2", "-ngl", "99")
    assert specs["tiny-long"].serve.ctx == 8192
    assert specs["tiny-long"].serve.kv_quant == "q8_0"
    assert sorted(s.port() for s in specs.values()) == [9100, 9101, 9102]
    assert run.managed is not None
    assert str(run.managed.serve_programs[0][1]) == "/opt/llama/llama-server"
    assert "# not carried: ttl: no idle unload" in draft.read_text()
    assert sorted(m.name for m in ModelRegistry.open(registry).list()) == [
        "fixed-port",
        "tiny",
        "tiny-long",
    ]

    capsys.readouterr()
    assert _cli(*argv) == 0  # again: nothing new, the draft left as it is
    again = capsys.readouterr().out
    assert "0 registered, 3 already registered, 2 skipped" in again
    assert f"{draft}: unchanged" in again


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models: [", "not YAML: "),
        ("a: &x [1]\n" + "b: *x\n" * 101 + "models: {}", "101 YAML aliases (*name), at most"),
        ("- just\n- a list", "expected a mapping at the top"),
        ("macros: {}\n", "models: expected a mapping of model ids"),
        ("models:\n  m:\n    cmd: x\nmacros:\n  'bad name': 1\n", "macros: 'bad name' is not"),
        ("models:\n  m: {cmd: x}\nstartPort: 99999\n", "startPort: expected a port number"),
        ("models: " + "[" * 100 + "]" * 100 + "\n", "nested deeper than 64"),
        ("models: " + "[" * 5000 + "]" * 5000 + "\n", "YAML nested too deep"),
    ],
)
def test_a_broken_llama_swap_config_is_refused_and_nothing_stored(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    registry = tmp_path / "models.json"

    code = _cli("import", "llama-swap", str(config), "--registry", str(registry))

    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{config}: " in err
    assert message in err
    assert not registry.exists()
    assert not (tmp_path / "llama-swap.run.toml").exists()
