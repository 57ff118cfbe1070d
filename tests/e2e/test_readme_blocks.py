"""Every README code block is run or parsed (issue 10 item 10).

- ``toml``: through `load_run_config` (a bare ``[[instances]]`` snippet behind the README's
  own ``[managed]`` section);
- ``python``: compiled; the embedding example is run for real on the tiny model (it once
  asked for deep health before the server was ready);
- ``sh`` and the ``$`` lines of ``console`` blocks: ``inferactors ...`` through the CLI's own
  parser (so every subcommand and option shown exists), ``make`` targets in the Makefile,
  scripts that exist, ``curl`` paths the control API serves; the ``sh`` blocks are run in
  order in a clone by `tests/e2e/test_readme_newcomer.py` (the systemd install is parsed
  against the unit by `tests/e2e/test_contrib.py`); the Operate session itself is run by
  `tests/e2e/test_operate_session.py`;
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
from inferactors import ModelRegistry, load_run_config
from inferactors._cli.main import build_parser
from inferactors.testing import FakeServerFaults, write_fake_server_program
from support import Unprivileged

BLOCKS = readme_blocks()
KINDS = {"toml", "python", "sh", "console", ""}
_SNIPPET_HEADER = """
[managed]
registry = "models.json"
data_root = "state"
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
def test_the_embedding_example_runs_as_written(
    server: str,
    server_dir: Path,
    llama_server: Path,
    tiny_gguf: Path,
    free_port: int,
    unprivileged: Unprivileged,
) -> None:
    """Run as shown, in a folder holding ``models.json`` (``tiny`` registered, as the README
    says ``inferactors models add`` does), with the server the product finds
    (``INFERACTORS_LLAMA_SERVER``): the real llama-server, and a fake that answers "loading"
    for 2 s (the first version asked for deep health at once and failed there). Only the
    port is changed (the README's 8090 may be taken here)."""
    program = llama_server
    if server != "llama-server":
        program = write_fake_server_program(
            server_dir / "slow-loading",
            faults=FakeServerFaults(load_s=2.0),
            python=unprivileged.python,
            sys_path=unprivileged.sys_path,
        )
    ModelRegistry.open(server_dir / "models.json").add(tiny_gguf, name="tiny")
    assert unprivileged.run_as in (None, "nobody")  # what the block says for root
    done = _run_embedding(server_dir, program, free_port)
    assert done.returncode == 0, done.stdout + done.stderr
    status, deep, after = done.stdout.splitlines()[-3:]
    assert status.startswith("InstanceStatus(state=<InstanceState.RUNNING"), status
    assert deep.startswith("CompletionResult("), deep
    assert after == "{}", after  # stopped and unloaded on leaving the block
    assert not list((server_dir / "state").glob("chat-*"))  # its directory went with it


def _run_embedding(where: Path, program: Path, port: int) -> subprocess.CompletedProcess[str]:
    code = _embedding().text
    assert code.count("port=8090") == 1
    code = code.replace("port=8090", f"port={port}")
    env = {**os.environ, "INFERACTORS_LLAMA_SERVER": str(program)}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=where,
        env=env,
    )


def _check_command(words: list[str]) -> None:
    program = words[0]
    if program in ("inferactors", "/opt/inferactors/bin/inferactors"):  # the service's venv
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
        system = {"python3", "/opt/inferactors/bin/pip", "useradd", "install", "ln", "umask"}
        assert program in {"printf", "sed", "kill", "cp", "systemctl", "openssl", *system}, words


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
        ("NAME ", "demo ", "fake ollama listening on http://127.0.0.1:", "3 of 3 instances")
    )


def _cli_block() -> Block:
    (block,) = [b for b in SHELL if "models add-tiny --registry examples/" in b.text]
    return block


def test_the_cli_blocks_model_steps_run_and_write_only_what_git_ignores(tmp_path: Path) -> None:
    """The CLI block's ``models`` steps that need no model of the reader's own (``add-tiny``
    and the ``list`` after it), run in order in a folder laid out as a clone (an
    ``examples/`` folder): ``tiny`` is registered in ``examples/models.json``, the model the
    run file serves, and every file they write is one the repository's .gitignore ignores
    (so ``git status`` in a clone shows nothing new)."""
    clone = tmp_path / "clone"
    (clone / "examples").mkdir(parents=True)
    steps = [
        words
        for words in shell_commands(_cli_block().text)
        if words[:3] in (["inferactors", "models", "add-tiny"], ["inferactors", "models", "list"])
        and "--registry" in words
    ]
    assert [words[2] for words in steps] == ["add-tiny", "list"]
    cli = Path(sys.executable).with_name("inferactors")
    outputs = []
    for words in steps:
        done = subprocess.run(
            [str(cli), *words[1:]], cwd=clone, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout)
    assert outputs[1].splitlines()[1].split()[:3] == ["tiny", "gguf", "1"], outputs[1]
    assert [m.name for m in ModelRegistry.open(clone / "examples" / "models.json").list()] == [
        "tiny"
    ]
    written = sorted(str(p.relative_to(clone)) for p in clone.rglob("*") if p.is_file())
    assert "tiny.gguf" in written
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(written),
        capture_output=True,
        text=True,
        check=False,
    )
    assert sorted(ignored.stdout.split()) == written, "not ignored by git: " + str(
        set(written) - set(ignored.stdout.split())
    )
