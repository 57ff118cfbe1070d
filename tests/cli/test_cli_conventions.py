"""CLI conventions (issue 19 item 5): help written for users (no docstring markup), shell
completion generated from the parser (shtab, completing in a real bash), and ``--json`` on
every command that prints data (``models list``, ``models verify``, ``probe`` here; the
client commands in test_cli_json.py)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from inferactors._cli.main import build_parser, main
from inferactors._service.control_server import serve_control
from service.control_support import FakeFleet

MARKUP = re.compile(r"``|`[\w.]+`|:(?:func|class|meth):|^\s*(?:Raises|Args|Returns):", re.M)
"""Sphinx/docstring markup a user should never read in ``--help``."""

PRINTS_DATA = (
    "status",
    "start",
    "stop",
    "restart",
    "logs",
    "events",
    "reload",
    "probe",
    "models list",
    "models verify",
)
"""The commands that print data (a table, a view, lines, a result)."""


def _parsers(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}".strip())


def test_no_help_text_shows_docstring_markup() -> None:
    seen = 0
    for path, parser in _parsers(build_parser()):
        texts = [parser.description or "", parser.epilog or ""]
        texts += [action.help or "" for action in parser._actions]
        for text in texts:
            assert not MARKUP.search(text), f"inferactors {path} --help: {text!r}"
        seen += 1
    assert seen > 20  # every command and subcommand was read


def test_run_help_as_printed_is_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "Supervise the instances of a run file" in out
    assert "``" not in out
    assert "EARLY" not in out
    assert "docs/run-file.md" in out


def test_every_command_that_prints_data_takes_json() -> None:
    parsers = dict(_parsers(build_parser()))
    lacking = [path for path in PRINTS_DATA if "--json" not in parsers[path]._option_string_actions]
    assert lacking == []


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (a real bash with the script sourced)."""
    line = " ".join(words)
    program = (
        f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE="{line}"; '
        'COMP_POINT=${#COMP_LINE}; _shtab_inferactors inferactors "${COMP_WORDS[-1]}" '
        '"${COMP_WORDS[-2]}"; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_and_options_from_the_parser() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "completion", "bash"],
        capture_output=True,
        text=True,
        check=True,
    )
    script = done.stdout
    assert sorted(_complete(script, "inferactors", "sta")) == ["start", "status"]
    assert _complete(script, "inferactors", "logs", "--fo") == ["--follow"]
    assert _complete(script, "inferactors", "models", "ve") == ["verify"]


@pytest.mark.parametrize("shell", ["zsh", "fish", "tcsh"])
def test_other_shells_get_a_script_naming_every_command(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for command in ("status", "reload", "completion", "llama-server"):
        assert command in script, (shell, command)


GGUF_BYTES = b"GGUF" + bytes(range(256)) * 4


def test_models_list_and_verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = str(tmp_path / "models.json")
    assert main(["models", "list", "--json", "--registry", registry]) == 0
    assert json.loads(capsys.readouterr().out) == []
    model = tmp_path / "tiny.gguf"
    model.write_bytes(GGUF_BYTES)
    assert main(["models", "add", str(model), "--name", "tiny", "--registry", registry]) == 0
    capsys.readouterr()
    assert main(["models", "list", "--json", "--registry", registry]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed == {
        "name": "tiny",
        "format": "gguf",
        "files": 1,
        "size_bytes": len(GGUF_BYTES),
        "signed_by": None,
        "root": str(tmp_path),
        "ollama_tag": None,
    }
    model.write_bytes(GGUF_BYTES[:-1] + b"x")  # tampered: verify says so, exit 1
    assert main(["models", "verify", "--json", "--registry", registry]) == 1
    (check,) = json.loads(capsys.readouterr().out)
    assert (check["name"], check["ok"]) == ("tiny", False)
    assert check["reason"]


async def test_probe_json_is_the_status_and_the_body(tmp_path: Path, nursery: trio.Nursery) -> None:
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=tmp_path))
    done = await trio.run_process(
        [
            sys.executable,
            "-m",
            "inferactors",
            "probe",
            "livez",
            "--json",
            "--state-dir",
            str(tmp_path),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == 200
    assert answer["body"] != ""
