"""Finding the supervisor without repeating the run file (issue 19 item 2): the run file or
``--state-dir`` given, else ``INFERACTORS_STATE_DIR`` or ``INFERACTORS_CONFIG``, else the
one run file of the current folder whose supervisor runs, else the user's state directory
(``$XDG_STATE_HOME/inferactors``, by platformdirs). A bare ``inferactors status`` in the
run's folder reaches its supervisor (it once said none was running)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from inferactors._config.state_dir import (
    control_socket_path,
    default_state_dir,
    find_state_dir,
    state_dir_of_file,
)
from inferactors._errors import InvalidConfig

RUN_FILE = '[managed]\ndata_root = "{root}"\n[[instances]]\nmode = "adopted"\nrole = "x"\n'


def run_file(where: Path, name: str, root: str) -> Path:
    path = where / name
    path.write_text(RUN_FILE.format(root=root))
    return path


@contextmanager
def listening(state_dir: Path) -> Iterator[None]:
    """A socket bound where a supervisor of ``state_dir`` listens."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(control_socket_path(state_dir)))
        sock.listen()
        yield


def test_arguments_come_first_and_not_both(tmp_path: Path) -> None:
    path = run_file(tmp_path, "run.toml", "state")
    env = {"INFERACTORS_STATE_DIR": "/elsewhere"}
    assert find_state_dir(None, tmp_path / "s", env, tmp_path) == tmp_path / "s"
    assert find_state_dir(path, None, env, tmp_path) == tmp_path / "state"
    with pytest.raises(InvalidConfig, match="give a run file or --state-dir, not both"):
        find_state_dir(path, tmp_path, {}, tmp_path)


def test_the_environment_names_a_state_directory_or_a_run_file(tmp_path: Path) -> None:
    path = run_file(tmp_path, "run.toml", "state")
    here = tmp_path / "empty"
    here.mkdir()
    assert find_state_dir(None, None, {"INFERACTORS_STATE_DIR": "/srv/x"}, here) == Path("/srv/x")
    assert find_state_dir(None, None, {"INFERACTORS_CONFIG": str(path)}, here) == (
        tmp_path / "state"
    )
    both = {"INFERACTORS_STATE_DIR": "/srv/x", "INFERACTORS_CONFIG": str(path)}
    with pytest.raises(InvalidConfig, match="set INFERACTORS_STATE_DIR or INFERACTORS_CONFIG"):
        find_state_dir(None, None, both, here)


def test_the_current_folders_running_run_file_is_found(tmp_path: Path) -> None:
    run_file(tmp_path, "operate.toml", "state")
    run_file(tmp_path, "other.toml", "idle")  # nothing runs it
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # not a run file
    (tmp_path / "broken.toml").write_text("[[instances]\n")  # not TOML
    with listening(tmp_path / "state"):
        assert find_state_dir(None, None, {}, tmp_path) == tmp_path / "state"


def test_two_running_run_files_in_one_folder_are_named(tmp_path: Path) -> None:
    run_file(tmp_path, "a.toml", "one")
    run_file(tmp_path, "b.toml", "two")
    several = pytest.raises(InvalidConfig, match=r"several run files.*a\.toml.*b\.toml")
    with listening(tmp_path / "one"), listening(tmp_path / "two"), several:
        find_state_dir(None, None, {}, tmp_path)


def test_nothing_running_here_is_the_users_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_file(tmp_path, "run.toml", "state")  # not running: no socket
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "inferactors"
    assert find_state_dir(None, None, {}, tmp_path) == tmp_path / "xdg" / "inferactors"


def test_a_run_file_without_managed_uses_the_users_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "run.toml"
    path.write_text('[[instances]]\nmode = "adopted"\nrole = "x"\n')
    assert state_dir_of_file(path) == tmp_path / "xdg" / "inferactors"


def test_a_bare_status_in_the_runs_folder_reaches_its_supervisor(tmp_path: Path) -> None:
    run_file(tmp_path, "operate.toml", "state")
    with listening(tmp_path / "state"):  # accepts, never answers: the CLI waits, then says so
        done = subprocess.run(
            [sys.executable, "-m", "inferactors", "status", "--timeout", "0.5"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    socket_path = control_socket_path(tmp_path / "state")
    assert f"the supervisor at {socket_path} did not answer within 0.5 s" in done.stderr
