"""The ``inferactors models`` handlers, called through a small argparse parser."""

from __future__ import annotations

import argparse
import io
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inferactors._cli import models_common
from inferactors._cli.models import (
    HashProgress,
    default_registry_path,
    format_size,
    register_models_commands,
)

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferactors")
    register_models_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def _run(*argv: str) -> int:
    args = _parser().parse_args(["models", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    return tmp_path / "reg" / "models.json"


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "tiny.gguf"
    path.write_bytes(GGUF_BYTES)
    return path


def test_add_registers_and_reports(
    gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(
        "add", str(gguf_file), "--name", "tiny", "--hf-repo", "me/tiny", "--registry", str(registry)
    )

    out, err = capsys.readouterr()
    assert code == 0
    assert out == f"registered tiny: gguf, 1 file, 1.0 KiB, root {gguf_file.parent}\n"
    assert err == ""
    saved = json.loads(registry.read_text())["models"][0]
    assert saved["source"] == {"hf_repo": "me/tiny"}
    assert saved["shards"][0]["size"] == len(GGUF_BYTES)


def test_add_with_bad_input_exits_2(
    gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("add", str(gguf_file), "--name", "has space", "--registry", str(registry)) == 2
    assert capsys.readouterr().err.startswith("inferactors: error: name: 'has space' is not")
    assert _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry)) == 0
    assert _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry)) == 2
    err = capsys.readouterr().err
    assert err == "inferactors: error: name: a model named 'tiny' is already registered\n"


def test_add_with_format_override(tmp_path: Path, registry: Path) -> None:
    model = tmp_path / "mlx"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    (model / "config.json").write_text("{}")
    assert (
        _run("add", str(model), "--name", "m", "--format", "mlx", "--registry", str(registry)) == 0
    )
    assert json.loads(registry.read_text())["models"][0]["format"] == "mlx"


def test_add_shows_progress_for_files_over_64_mib_as_plain_lines_in_a_pipe(
    tmp_path: Path,
    registry: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = tmp_path / "big.gguf"
    with big.open("wb") as handle:
        handle.truncate(65 << 20)  # sparse: instant to write, 65 MiB to hash
    ticks = itertools.count(0.0, 0.75)  # each chunk (4 MiB) seems to take 0.75 s
    monkeypatch.setattr(models_common, "time", SimpleNamespace(monotonic=lambda: next(ticks)))

    assert _run("add", str(big), "--name", "big", "--registry", str(registry)) == 0

    lines = capsys.readouterr().err.splitlines()
    progress = [line for line in lines if line.startswith("hashing big.gguf:")]
    assert "\r" not in "".join(lines)  # not a terminal: no carriage returns
    assert 5 <= len(progress) <= 9  # 17 chunks of 4 MiB in 12 s: a line per 2 s, not per chunk
    assert progress[0] == "hashing big.gguf:  24% 16.0 MiB of 65.0 MiB, 5.3 MiB/s, 9 s left"
    assert progress[-1] == "hashing big.gguf: 100% 65.0 MiB of 65.0 MiB, done in 12 s"


def test_add_ollama_and_list_table(
    gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry))
    assert (
        _run("add-ollama", "--name", "qwen", "--tag", "qwen3:0.6b", "--registry", str(registry))
        == 0
    )
    assert capsys.readouterr().out.endswith("registered qwen: ollama tag qwen3:0.6b\n")

    assert _run("list", "--registry", str(registry)) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "NAME  FORMAT  FILES  SIZE     SIGNED BY  ROOT",
        "qwen  ollama  0      -        -          (ollama tag qwen3:0.6b)",
        f"tiny  gguf    1      1.0 KiB  -          {gguf_file.parent}",
    ]


def test_list_of_an_empty_registry(registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("list", "--registry", str(registry)) == 0
    assert capsys.readouterr().out == f"no models registered in {registry}\n"


def test_verify_reports_ok_and_failed(
    gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry))
    _run("add-ollama", "--name", "qwen", "--tag", "qwen3:0.6b", "--registry", str(registry))
    capsys.readouterr()

    assert _run("verify", "--registry", str(registry)) == 0
    assert capsys.readouterr().out == (
        "ok      qwen: ollama tag qwen3:0.6b: no files pinned (Ollama keeps them)\n"
        "ok      tiny: 1 file verified\n"
    )

    data = bytearray(gguf_file.read_bytes())
    data[100] ^= 1
    gguf_file.write_bytes(bytes(data))
    assert _run("verify", "tiny", "--registry", str(registry)) == 1
    assert capsys.readouterr().out == (
        "FAILED  tiny: shard tiny.gguf: BLAKE3 differs from the registry (tampered or replaced)\n"
    )


def test_verify_unknown_model_exits_2(registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("verify", "nope", "--registry", str(registry)) == 2
    assert capsys.readouterr().err == "inferactors: error: no registered model 'nope'\n"


def test_remove(gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry))
    assert _run("remove", "tiny", "--registry", str(registry)) == 0
    assert capsys.readouterr().out.endswith("removed tiny (its files are untouched)\n")
    assert json.loads(registry.read_text())["models"] == []
    assert gguf_file.exists()


def test_corrupt_registry_exits_2_naming_file_and_field(
    gguf_file: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.parent.mkdir()
    registry.write_text('{"schema": "inferactors.model-registry.v1", "models": 3}')
    assert _run("add", str(gguf_file), "--name", "tiny", "--registry", str(registry)) == 2
    assert capsys.readouterr().err == (
        f"inferactors: error: {registry}: $.models: expected a list, got a number\n"
    )
    assert registry.read_text().endswith('"models": 3}')


def test_registry_defaults_to_the_environment(
    gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERACTORS_REGISTRY", str(tmp_path / "env.json"))
    assert default_registry_path() == tmp_path / "env.json"
    assert _run("add", str(gguf_file), "--name", "tiny") == 0
    assert (tmp_path / "env.json").exists()


def test_default_registry_path_without_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERACTORS_REGISTRY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_registry_path() == tmp_path / ".local/share/inferactors/models.json"
    monkeypatch.setenv("INFERACTORS_REGISTRY", "")
    assert default_registry_path() == tmp_path / ".local/share/inferactors/models.json"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_hash_progress_rewrites_one_line_on_a_terminal_once_a_second() -> None:
    stream = _Terminal()
    now = [10.0]
    progress = HashProgress(stream=stream, clock=lambda: now[0])
    path = Path("/m/big.gguf")
    total = 200 << 20

    progress(Path("/m/small.json"), 10, 10)  # under 64 MiB: silent
    progress(path, 1 << 20, total)  # first chunk: starts the clock, says nothing
    now[0] = 10.5
    progress(path, 50 << 20, total)  # within 1 s: throttled
    now[0] = 11.0
    progress(path, 100 << 20, total)
    now[0] = 11.5
    progress(path, 150 << 20, total)  # throttled
    now[0] = 12.0
    progress(path, total, total)  # done: shown, and the line ended

    first = "hashing big.gguf:  50% 100.0 MiB of 200.0 MiB, 99.0 MiB/s, 1 s left"
    last = "hashing big.gguf: 100% 200.0 MiB of 200.0 MiB, done in 2 s"
    assert stream.getvalue() == f"\r{first}\r{last.ljust(len(first))}\n"  # no trace of the first


def test_hash_progress_in_a_pipe_is_a_line_every_two_seconds_and_never_for_quick_files() -> None:
    stream = io.StringIO()
    now = [0.0]
    progress = HashProgress(stream=stream, clock=lambda: now[0])
    quick, slow = Path("/m/quick.gguf"), Path("/m/slow.gguf")
    total = 1000 << 20
    for done in range(1, 11):  # hashed within 0.9 s: nothing said
        progress(quick, done * (100 << 20), total)
        now[0] += 0.1
    for done in range(1, 11):
        progress(slow, done * (100 << 20), total)
        now[0] += 1.0
    assert stream.getvalue().splitlines() == [
        "hashing slow.gguf:  30% 300.0 MiB of 1000.0 MiB, 100.0 MiB/s, 7 s left",
        "hashing slow.gguf:  50% 500.0 MiB of 1000.0 MiB, 100.0 MiB/s, 5 s left",
        "hashing slow.gguf:  70% 700.0 MiB of 1000.0 MiB, 100.0 MiB/s, 3 s left",
        "hashing slow.gguf:  90% 900.0 MiB of 1000.0 MiB, 100.0 MiB/s, 1 s left",
        "hashing slow.gguf: 100% 1000.0 MiB of 1000.0 MiB, done in 9 s",
    ]


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (522_336, "510.1 KiB"),
        (5 << 30, "5.0 GiB"),
        (3 << 50, "3072.0 TiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text
