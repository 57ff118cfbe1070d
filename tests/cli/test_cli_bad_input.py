"""The real ``inferactors`` command given hostile files: a run file that is a nesting bomb or
holds a 5,000-digit integer, a registry with a bomb, a key twice or a 5,000-digit size. Each
run prints ONE line on stderr, no traceback, and exits 2 (bad input, ``_cli/main.py``); a
bad registry is left as it was. Also a run file or registry that is a FIFO, ``/dev/zero`` or a
directory (refused unread, at once), one over its size cap, and a 1 MB value (echoed cut).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCHEMA = "inferactors.model-registry.v1"

RUN_FILE = """node_id = "x"
[managed]
registry = "models.json"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "/bin/true" }}
[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port} }}
"""

REGISTRIES = {
    "nesting-bomb": "[" * 100_000 + "]" * 100_000,
    "duplicate-key": f'{{"schema": "{SCHEMA}", "models": [], "models": []}}',
    "5000-digits": (
        f'{{"schema": "{SCHEMA}", "models": [{{"name": "tiny", "format": "gguf", '
        '"root": "/m", "shards": [{"path": "t.gguf", "size": '
        + "9" * 5000
        + ', "blake3": "'
        + "0" * 64
        + '"}]}]}'
    ),
}
WHY = {
    "nesting-bomb": "JSON nested deeper than 64 levels at line 1, column 65",
    "duplicate-key": '$: the object has the key "models" twice',
    "5000-digits": "$.models[0].shards[0].size: an integer of 5000 digits (at most 100)",
}


def inferactors(*argv: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr[:2000]
    return lines[0]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a = " + "[" * 100_000 + "]" * 100_000, "TOML nested too deep"),
        ("a = " + "{b = " * 100_000 + "}" * 100_000, "TOML nested too deep"),
        (RUN_FILE.format(port="9" * 5000), "$.instances[0].serve.port: an integer of more"),
    ],
    ids=["array-bomb", "table-bomb", "5000-digits"],
)
def test_run_with_a_hostile_run_file_prints_one_line_and_exits_2(
    tmp_path: Path, text: str, why: str
) -> None:
    (tmp_path / "bad.toml").write_text(text)
    code, stdout, stderr = inferactors("run", "bad.toml", cwd=tmp_path)
    assert code == 2
    assert one_line(stderr).startswith(f"inferactors run: bad.toml: {why}")
    assert stdout == ""


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_run_with_a_hostile_registry_prints_one_line_and_exits_2(tmp_path: Path, kind: str) -> None:
    (tmp_path / "run.toml").write_text(RUN_FILE.format(port=18591))
    (tmp_path / "models.json").write_text(REGISTRIES[kind])
    code, _, stderr = inferactors("run", "run.toml", cwd=tmp_path)
    assert code == 2
    assert one_line(stderr).endswith(f"models.json: {WHY[kind]}")
    assert (tmp_path / "models.json").read_text() == REGISTRIES[kind]


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
@pytest.mark.parametrize(
    "command",
    [
        ("list",),
        ("verify",),
        ("remove", "tiny"),
        ("add-ollama", "--name", "q", "--tag", "q:latest"),
    ],
    ids=["list", "verify", "remove", "add-ollama"],
)
def test_models_with_a_hostile_registry_prints_one_line_exits_2_and_keeps_the_file(
    tmp_path: Path, kind: str, command: tuple[str, ...]
) -> None:
    registry = tmp_path / "models.json"
    registry.write_text(REGISTRIES[kind])
    code, stdout, stderr = inferactors(
        "models", *command, "--registry", str(registry), cwd=tmp_path
    )
    assert code == 2
    assert one_line(stderr) == f"inferactors: error: {registry}: {WHY[kind]}"
    assert stdout == ""
    assert registry.read_text() == REGISTRIES[kind]


# Files that are not files (issue 8 item 3): refused unread, one line, exit 2, at once.


def not_a_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.in"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")  # reading it would never end
    else:
        path.mkdir()
    return path


KINDS = {"fifo": "a FIFO", "dev-zero": "a character device", "directory": "a directory"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_run_with_a_run_file_that_is_not_a_file_prints_one_line_and_exits_2(
    tmp_path: Path, kind: str
) -> None:
    path = not_a_file(tmp_path, kind)
    code, stdout, stderr = inferactors("run", path.name, cwd=tmp_path)
    assert (code, stdout) == (2, "")
    assert one_line(stderr) == (
        f"inferactors run: {path.name}: the run file is not a regular file ({KINDS[kind]})"
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_models_list_with_a_registry_that_is_not_a_file_prints_one_line_and_exits_2(
    tmp_path: Path, kind: str
) -> None:
    path = not_a_file(tmp_path, kind)
    code, stdout, stderr = inferactors("models", "list", "--registry", str(path), cwd=tmp_path)
    assert (code, stdout) == (2, "")
    assert one_line(stderr) == (
        f"inferactors: error: {path}: the registry is not a regular file ({KINDS[kind]})"
    )


def test_run_with_a_50_mb_run_file_names_the_limit_and_echoes_nothing(tmp_path: Path) -> None:
    (tmp_path / "big.toml").write_text(f'node_id = "{"n" * 50_000_000}"\n')
    code, _, stderr = inferactors("run", "big.toml", cwd=tmp_path)
    assert code == 2
    assert one_line(stderr) == (
        "inferactors run: big.toml: the run file is larger than its limit of 1 MiB"
    )


def test_a_long_value_from_the_run_file_is_echoed_cut(tmp_path: Path) -> None:
    (tmp_path / "long.toml").write_text(f'node_id = "{"n" * 1_000_000}"\n')
    code, _, stderr = inferactors("run", "long.toml", cwd=tmp_path)
    assert code == 2
    line = one_line(stderr)
    assert line.endswith("'... (1000000 characters)")
    assert len(line) < 1100
