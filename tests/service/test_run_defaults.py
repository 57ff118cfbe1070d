"""``inferactors run`` fills in what a run file left out (`load_run_file`): the llama-server
found as ``inferactors llama-server`` finds it, and ``nobody`` for ``run_as`` as root; each
said in one line; a refusal naming the field when no llama-server is found."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from inferactors import InvalidConfig
from inferactors._config.convert import load_run_config
from inferactors._config.runfile import RunConfig
from inferactors._edges.containment import user_name
from inferactors._flavor import InferFlavor
from inferactors._service.run_defaults import check_run_as, found_defaults, load_run_file
from support import Unprivileged

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


# A supervisor that is not root runs its servers only as itself: a run_as of another user is
# refused as the file is read, naming the field, not per instance at its first start.

NOBODY = pwd.getpwnam("nobody")
MANAGED_ONLY = RUN_FILE.replace("infer.llamacpp", "infer.ollama")


def _with_run_as(where: Path, run_as: str) -> RunConfig:
    text = MANAGED_ONLY.replace("[managed]\n", f'[managed]\nrun_as = "{run_as}"\n')
    return load_run_config(_run_file(where, text))


def _not_nobody() -> int:
    """A uid that is not root's nor nobody's: ours when we are not root."""
    return os.geteuid() if os.geteuid() not in (0, NOBODY.pw_uid) else 1


@pytest.mark.parametrize("run_as", ["nobody", str(NOBODY.pw_uid), f"{NOBODY.pw_uid}:12345"])
def test_a_run_as_of_another_user_is_refused_unless_root(tmp_path: Path, run_as: str) -> None:
    config = _with_run_as(tmp_path, run_as)
    euid = _not_nobody()
    with pytest.raises(InvalidConfig) as refused:
        check_run_as(config, euid)
    me = user_name(euid)
    assert str(refused.value) == (
        f"$.managed.run_as {run_as!r}: running servers as another user needs root; this "
        f"supervisor runs as {me} (uid {euid}): leave run_as out to run them as {me}"
    )
    check_run_as(config, 0)  # root may (admission resolves it per instance, as before)


@pytest.mark.parametrize(
    "run_as", ["nobody", str(NOBODY.pw_uid), f"{NOBODY.pw_uid}:{NOBODY.pw_gid}"]
)
def test_a_run_as_of_the_supervisors_own_user_is_taken(tmp_path: Path, run_as: str) -> None:
    check_run_as(_with_run_as(tmp_path, run_as), NOBODY.pw_uid)  # nobody's supervisor


def test_an_unknown_run_as_is_refused_naming_the_field_unless_root(tmp_path: Path) -> None:
    config = _with_run_as(tmp_path, "no-such-user-here")
    with pytest.raises(InvalidConfig, match=r"^\$\.managed\.run_as 'no-such-user-here': no such"):
        check_run_as(config, _not_nobody())
    check_run_as(config, 0)  # as root admission says it, per instance, as before


def test_no_run_as_is_taken_by_anyone(tmp_path: Path) -> None:
    config = load_run_config(_run_file(tmp_path, MANAGED_ONLY))
    for euid in (0, NOBODY.pw_uid, _not_nobody()):
        check_run_as(config, euid)


def test_inferactors_run_refuses_another_users_run_as_in_one_line_and_exit_2(
    unprivileged: Unprivileged,
) -> None:
    """For real: ``inferactors run`` as ourselves, or as ``nobody`` when we are root (its
    run file naming ``1:1``, an account that is not nobody's)."""
    where = unprivileged.directory("run-as")
    as_nobody = os.geteuid() == 0
    other = "1:1" if as_nobody else "nobody"
    text = MANAGED_ONLY.replace("[managed]\n", f'[managed]\nrun_as = "{other}"\n')
    path = _run_file(where, text)
    path.chmod(0o644)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(unprivileged.sys_path)}
    user = {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid, "extra_groups": []} if as_nobody else {}
    done = subprocess.run(  # type: ignore[call-overload]
        [unprivileged.python, "-m", "inferactors", "run", str(path)],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **user,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    runner = NOBODY.pw_uid if as_nobody else os.geteuid()
    me = user_name(runner)
    assert line == (
        f"inferactors run: {path}: $.managed.run_as '{other}': running servers as another "
        f"user needs root; this supervisor runs as {me} (uid {runner}): leave run_as out to "
        f"run them as {me}"
    )
    assert not (where / "state").exists()  # refused before anything was made
