"""Every README code block is run or parsed (issue 10 item 10).

- ``toml``: through `load_run_config` (a bare ``[[instances]]`` snippet behind the README's
  own ``[managed]`` section);
- ``python``: compiled; the embedding example is run for real on the tiny model (it once
  asked for deep health before the server was ready);
- ``sh`` and the ``$`` lines of ``console`` blocks: ``inferactors ...`` through the CLI's own
  parser (so every subcommand and option shown exists), ``make`` targets in the Makefile,
  scripts that exist, ``curl`` paths the control API serves; the Operate session itself is
  run against fake servers by `tests/e2e/test_operate_session.py`;
- untagged blocks are program output: every line as ``inferactors run`` prints it, or the
  table ``inferactors demo`` prints, or ``examples/crashing.out`` (kept true by
  `tests/e2e/test_example_crashing.py`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from e2e.readme_blocks_support import (
    ROOT,
    Block,
    console_commands,
    is_run_output_line,
    readme_blocks,
    served_paths,
    shell_commands,
)
from inferactors import load_run_config
from inferactors._cli.main import build_parser
from inferactors.testing import FakeServerFaults, write_fake_server_program
from support import Unprivileged

BLOCKS = readme_blocks()
KINDS = {"toml", "python", "sh", "console", ""}
_SNIPPET_HEADER = """
[managed]
registry = "models.json"
data_root = "state"
serve_programs = { "infer.llamacpp" = "/usr/local/bin/llama-server" }
"""


def _of(lang: str) -> list[Block]:
    return [block for block in BLOCKS if block.lang == lang]


def _ids(blocks: list[Block]) -> list[str]:
    return [block.id for block in blocks]


def test_every_block_is_of_a_kind_checked_here() -> None:
    assert BLOCKS
    assert {block.lang for block in BLOCKS} <= KINDS, _ids(BLOCKS)


@pytest.mark.parametrize("block", _of("toml"), ids=_ids(_of("toml")))
def test_toml_blocks_load_as_run_files(block: Block, tmp_path: Path) -> None:
    text = block.text
    if "[managed]" not in text and "node_id" not in text:
        text = _SNIPPET_HEADER + text
    tomllib.loads(text)
    run_file = tmp_path / "run.toml"
    run_file.write_text(text)
    assert load_run_config(run_file).instances


@pytest.mark.parametrize("block", _of("python"), ids=_ids(_of("python")))
def test_python_blocks_compile(block: Block) -> None:
    compile(block.text, f"README.md:{block.line}", "exec")


def _embedding() -> Block:
    (block,) = [b for b in _of("python") if "open_runtime(config" in b.text]
    return block


@pytest.mark.parametrize("server", ["llama-server", "slow-loading fake"])
def test_the_embedding_example_waits_for_running_then_gets_one_token(
    server: str,
    server_dir: Path,
    llama_server: Path,
    registry_path: Path,
    free_port: int,
    unprivileged: Unprivileged,
) -> None:
    """Run as shown, on the real llama-server, and on a fake that answers "loading" for
    2 s (the first version asked for deep health at once and failed there)."""
    program = llama_server
    if server != "llama-server":
        program = write_fake_server_program(
            server_dir / "slow-loading",
            faults=FakeServerFaults(load_s=2.0),
            python=unprivileged.python,
            sys_path=unprivileged.sys_path,
        )
    done = _run_embedding(server_dir, program, registry_path, free_port, unprivileged)
    assert done.returncode == 0, done.stdout + done.stderr
    status, deep, evidence = done.stdout.splitlines()[-3:]
    assert status.startswith("InstanceStatus(state=<InstanceState.RUNNING"), status
    assert deep.startswith("CompletionResult("), deep
    assert evidence.startswith("RunEvidence("), evidence


def _run_embedding(
    where: Path, program: Path, registry: Path, port: int, unprivileged: Unprivileged
) -> subprocess.CompletedProcess[str]:
    code = _embedding().text
    for shown, real in (
        ('Path("models.json")', f"Path({str(registry)!r})"),
        ('Path("state")', f"Path({str(where / 'state')!r})"),
        ('Path("/usr/local/bin/llama-server")', f"Path({str(program)!r})"),
        ("port=8090", f"port={port}"),
    ):
        assert code.count(shown) == 1, shown
        code = code.replace(shown, real)
    if os.geteuid() == 0:  # as root a managed server needs an unprivileged user
        code = code.replace("data_root=", f"run_as={unprivileged.run_as!r}, data_root=")
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=where,
    )


def _check_command(words: list[str]) -> None:
    program = words[0]
    if program == "inferactors":
        build_parser().parse_args(words[1:])  # SystemExit on any unknown command or option
    elif program == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert words[1] in targets, words
    elif program == ".venv/bin/python":
        assert (ROOT / words[1]).is_file(), words
    elif program == "python":  # the front door session's clients.py: a README block
        assert words[1:] == ["clients.py"], words
    elif program == "curl":
        url = next(w for w in words if w.startswith("http"))
        assert "--unix-socket" in words, words
        assert urlsplit(url).path in served_paths(), url
    else:
        assert program in {"printf", "sed", "kill", "cp", "systemctl", "openssl"}, words


SHELL = [block for block in BLOCKS if block.lang == "sh"]


@pytest.mark.parametrize("block", SHELL, ids=_ids(SHELL))
def test_shell_blocks_name_commands_that_exist(block: Block) -> None:
    commands = shell_commands(block.text)
    assert commands
    for words in commands:
        _check_command(words)


CONSOLE = _of("console")


@pytest.mark.parametrize("block", CONSOLE, ids=_ids(CONSOLE))
def test_console_blocks_name_commands_that_exist(block: Block) -> None:
    session = console_commands(block.text)
    assert session
    for words, _ in session:
        _check_command(words)


OUTPUT = _of("")


@pytest.mark.parametrize("block", OUTPUT, ids=_ids(OUTPUT))
def test_output_blocks_are_what_the_commands_print(block: Block) -> None:
    if block.text == (ROOT / "examples" / "crashing.out").read_text():
        return  # run for real by test_example_crashing.py
    other = [
        line
        for line in block.text.splitlines()
        if not is_run_output_line(line) and not _table_or_summary(line)
    ]
    assert other == [], block.text


def _table_or_summary(line: str) -> bool:
    return line.startswith(
        ("INSTANCE ", "demo-", "fake ollama listening on http://127.0.0.1:", "3 of 3 instances")
    )
