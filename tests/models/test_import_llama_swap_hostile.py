"""``models import llama-swap`` on configs that carry secrets or try to blow up: no API key
or environment value reaches the draft (a 0600 file) or a line of output, YAML anchors and
merge keys are read but an alias bomb and a macro bomb are refused in well under a second,
naming what was refused, with nothing stored."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pytest

from inferactors import ModelRegistry, load_run_config
from inferactors._cli.models import register_models_commands


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def gguf(tmp_path: Path, tiny_gguf: Path) -> Path:
    return Path(shutil.copy2(tiny_gguf, tmp_path / "tiny.gguf"))


def _import(config: Path, tmp_path: Path) -> tuple[int, Path, Path]:
    registry, draft = tmp_path / "models.json", tmp_path / "draft.toml"
    code = _cli(
        "import", "llama-swap", str(config), "--registry", str(registry), "--draft", str(draft)
    )
    return code, registry, draft


def test_no_secret_reaches_the_draft_or_the_output_and_the_draft_is_private(
    tmp_path: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_KEY", "sk-proxy-0000")
    monkeypatch.setenv("SERVER_KEY", "sk-very-secret-1234")
    monkeypatch.setenv("ALIAS", "alias-from-env")
    monkeypatch.setenv("THREADS", "2")
    config = tmp_path / "swap.yaml"
    config.write_text(
        'apiKeys:\n  - "${env.PROXY_KEY}"\n  - "sk-literal-proxy-key"\nmodels:\n  llama:\n'
        f"    cmd: llama-server --port 9100 -m {gguf} --api-key ${{env.SERVER_KEY}}"
        " --hf-token=hf_literal_token --alias ${env.ALIAS} --threads ${env.THREADS}\n"
    )

    code, _registry, draft = _import(config, tmp_path)

    captured = capsys.readouterr()
    assert code == 0, captured.err
    shown = captured.out + captured.err + draft.read_text()
    for secret in (
        "sk-proxy-0000",
        "sk-very-secret-1234",
        "sk-literal",
        "hf_literal",
        "alias-from",
    ):
        assert secret not in shown
    assert draft.stat().st_mode & 0o777 == 0o600
    out = captured.out
    assert "models.llama: not carried: --api-key <secret>: takes a secret, never carried" in out
    assert "models.llama: not carried: --hf-token <secret>: takes a secret" in out
    assert (
        "models.llama: not carried: --alias ${env.ALIAS}: its value comes from the "
        "environment (${env.ALIAS}), never written into the draft" in out
    )
    assert "apiKeys: not carried (the keys are not shown)" in out
    (instance,) = load_run_config(draft).instances
    assert instance.spec.serve.extra_args == ()
    assert "--threads 2: its value comes from the environment (${env.THREADS})" in out


def test_a_draft_is_never_written_through_a_link(
    tmp_path: Path, gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT")
    (tmp_path / "draft.toml").symlink_to(victim)
    config = tmp_path / "swap.yaml"
    config.write_text(f"models:\n  a:\n    cmd: llama-server -m {gguf}\n")

    code, registry, _draft = _import(config, tmp_path)

    assert code == 2
    assert "--draft: " in capsys.readouterr().err
    assert victim.read_text() == "IMPORTANT"
    assert not registry.exists()


def test_anchors_and_merge_keys_are_read(
    tmp_path: Path, gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "swap.yaml"
    config.write_text(
        "x-defaults: &defaults\n  ttl: 300\n  macros: {ctx: '4096'}\nmodels:\n  llama:\n"
        f"    <<: *defaults\n    cmd: llama-server -c ${{ctx}} -m {gguf}\n"
    )

    code, _registry, draft = _import(config, tmp_path)

    out = capsys.readouterr().out
    assert code == 0
    assert "models.llama: not carried: ttl: no idle unload" in out
    (instance,) = load_run_config(draft).instances
    assert instance.spec.serve.ctx == 4096


def _doubling(levels: int, word: str, fanout: int = 8) -> str:
    lines = [f'  a0: "{word}"']
    lines += [f'  a{i}: "' + f"${{a{i - 1}}}" * fanout + '"' for i in range(1, levels)]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in (1, 2, 3))
            + "l9: [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]\nmodels: {m: {cmd: x}}\n",
            "the YAML expands to more than 100000 values through its aliases",
        ),
        (
            f"macros:\n{_doubling(9, 'x' * 16)}\nmodels:\n  m:\n    cmd: llama-server -m m.gguf"
            " --alias ${a8}\n",
            "models.m.cmd: macros expand to more than 64 KiB",
        ),
        (
            f"macros:\n{_doubling(12, '')}\nmodels:\n  m:\n    cmd: llama-server -m m.gguf"
            " --alias x${a11}\n",
            "models.m.cmd: more than 10000 macro references expanded",
        ),
    ],
)
def test_an_alias_bomb_or_a_macro_bomb_is_refused_at_once(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "swap.yaml"
    config.write_text(text)
    assert config.stat().st_size < 2048

    started = time.monotonic()
    code, registry, _draft = _import(config, tmp_path)
    took = time.monotonic() - started

    captured = capsys.readouterr()
    assert message in captured.out + captured.err
    assert code in (0, 2)  # refused outright, or the one model skipped with why
    assert took < 5, took  # unbounded, the smallest of these runs for minutes
    assert not registry.exists() or "registered" not in captured.out.split("skipped")[0]


def test_a_model_path_llama_server_cannot_read_is_skipped_saying_why(
    tmp_path: Path, gguf: Path, tiny_mlx_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(tiny_mlx_model, tmp_path / "mlxdir")
    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    config = tmp_path / "config.yaml"
    config.write_text(
        "models:\n"
        "  torch:\n    cmd: llama-server --port ${PORT} -m w.bin\n"
        "  mlx:\n    cmd: llama-server --port ${PORT} -m mlxdir\n"
        "  tiny:\n    cmd: llama-server --port ${PORT} -m tiny.gguf\n"
    )

    code, registry, draft = _import(config, tmp_path)

    assert code == 0
    out = capsys.readouterr().out
    assert f"torch: skipped: path: {tmp_path}/w.bin is not a .gguf file, and llama-server " in out
    assert f"mlx: skipped: path: {tmp_path}/mlxdir is a folder, and llama-server reads one " in out
    assert "models.mlx: not drafted: its files are not all registered" in out
    assert "tiny: registered: gguf" in out
    drafted = load_run_config(draft)
    assert [i.spec.model for i in drafted.instances] == ["tiny"]
    assert [m.name for m in ModelRegistry.open(registry).list()] == ["tiny"]
