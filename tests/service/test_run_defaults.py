"""``inferactors run`` fills in what a run file left out (`load_run_file`): the llama-server
found as ``inferactors llama-server`` finds it, and ``nobody`` for ``run_as`` as root; each
said in one line; a refusal naming the field when no llama-server is found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferactors import InvalidConfig
from inferactors._flavor import InferFlavor
from inferactors._service.run_defaults import found_defaults, load_run_file

RUN_FILE = """
[managed]
registry = "models.json"
data_root = "state"

[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
"""


@pytest.fixture
def nothing_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No llama-server anywhere: the variable unset, none on PATH, an empty cache."""
    monkeypatch.delenv("INFERACTORS_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("INFERACTORS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _run_file(where: Path, text: str = RUN_FILE) -> Path:
    path = where / "run.toml"
    path.write_text(text)
    return path


def _program(where: Path) -> Path:
    program = where / "bin" / "llama-server"
    program.parent.mkdir(exist_ok=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return program


def test_the_named_llama_server_is_used_and_said(
    nothing_found: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = _program(nothing_found)
    monkeypatch.setenv("INFERACTORS_LLAMA_SERVER", str(program))
    config, said = load_run_file(_run_file(nothing_found))
    assert config.managed is not None
    assert config.managed.serve_program(InferFlavor.LLAMACPP) == program.resolve()
    line = next(line for line in said if line.startswith("llama-server: "))
    assert f"llama-server: {program.resolve()} ($INFERACTORS_LLAMA_SERVER;" in line


def test_one_on_path_is_used_and_said(nothing_found: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = _program(nothing_found)
    monkeypatch.setenv("PATH", str(program.parent))
    config, said = load_run_file(_run_file(nothing_found))
    assert config.managed is not None
    assert config.managed.serve_program(InferFlavor.LLAMACPP) == program.resolve()
    assert any("(on PATH;" in line for line in said), said


def test_nothing_found_is_refused_naming_the_file_the_field_and_where_it_looked(
    nothing_found: Path,
) -> None:
    path = _run_file(nothing_found)
    with pytest.raises(InvalidConfig) as info:
        load_run_file(path)
    message = str(info.value)
    assert message.startswith(f'{path}: $.managed.serve_programs has no "infer.llamacpp" entry')
    assert "$INFERACTORS_LLAMA_SERVER unset, none on PATH" in message
    assert str(nothing_found / "cache") in message


def test_a_named_llama_server_that_is_not_there_is_refused(
    nothing_found: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERACTORS_LLAMA_SERVER", str(nothing_found / "missing"))
    with pytest.raises(InvalidConfig, match=r"serve_programs has no .* is not an executable file"):
        load_run_file(_run_file(nothing_found))


def test_a_file_naming_its_program_looks_for_none(nothing_found: Path) -> None:
    text = RUN_FILE.replace(
        "[managed]\n", '[managed]\nserve_programs = { "infer.llamacpp" = "s" }\n'
    )
    config, said = load_run_file(_run_file(nothing_found, text))
    assert config.managed is not None
    assert config.managed.serve_program(InferFlavor.LLAMACPP) == nothing_found / "s"
    assert not [line for line in said if line.startswith("llama-server")]


@pytest.mark.parametrize(("euid", "run_as"), [(0, "nobody"), (1000, None)])
def test_run_as_defaults_to_nobody_as_root_only(
    nothing_found: Path, euid: int, run_as: str | None
) -> None:
    text = RUN_FILE.replace("infer.llamacpp", "infer.ollama")
    config, _ = load_run_file(_run_file(nothing_found, text))
    assert found_defaults(config, euid).run_as == run_as


@pytest.mark.skipif(os.geteuid() != 0, reason="the root default is said only as root")
def test_as_root_the_run_as_default_is_said(nothing_found: Path) -> None:
    text = RUN_FILE.replace("infer.llamacpp", "infer.ollama")
    config, said = load_run_file(_run_file(nothing_found, text))
    assert config.managed is not None
    assert config.managed.run_as == "nobody"
    assert any(line.startswith("running as root: the servers run as user nobody") for line in said)


def test_inferactors_run_refuses_with_one_line_and_exit_2(nothing_found: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "INFERACTORS_LLAMA_SERVER"}
    env |= {"PATH": str(nothing_found / "empty-bin"), "INFERACTORS_CACHE_DIR": str(nothing_found)}
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "run", str(_run_file(nothing_found))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("inferactors run: ")
    assert '$.managed.serve_programs has no "infer.llamacpp" entry for $.instances[0]' in line
