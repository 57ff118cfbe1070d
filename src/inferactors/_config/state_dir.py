"""Where a supervisor keeps its control socket and logs: its state directory.

The run file's ``[managed] data_root`` when it has one, else the user's state directory
(`default_state_dir`: platformdirs' ``user_state_path``, which on Linux is
``$XDG_STATE_HOME/inferactors``, else ``~/.local/state/inferactors``). The supervisor
(`state_dir_of`) and the commands that talk to it (`state_dir_of_file`) find it the same
way, so ``inferactors status config.toml`` reaches the supervisor of ``inferactors run
config.toml``; its control socket is ``<state dir>/control.sock`` (`control_socket_path`).

Without a run file or ``--state-dir``, a command finds the supervisor with `find_state_dir`:
``INFERACTORS_STATE_DIR`` (a state directory) or ``INFERACTORS_CONFIG`` (a run file), then
a run file in the current folder whose supervisor is running (its socket exists), then the
default. This module reads TOML with `toml_text.parse_toml` only (no converter), so a
command that needs no more than a socket path loads little.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import InvalidConfig
from .._untrusted_file import read_capped_text

if typing.TYPE_CHECKING:
    from .runfile import RunConfig

APP_NAME = "inferactors"
CONTROL_SOCKET = "control.sock"
"""The control socket's name in the state directory."""
READ_ONLY_SOCKET = "control-ro.sock"
"""The read-only socket's name in the state directory (served with a read group)."""
STATE_DIR_ENV = "INFERACTORS_STATE_DIR"
CONFIG_ENV = "INFERACTORS_CONFIG"
MAX_CANDIDATES = 32
"""The most ``*.toml`` files of the current folder read when looking for a supervisor."""


def default_state_dir() -> Path:
    """The state directory of a run file without ``[managed]`` (module docstring)."""
    from platformdirs import user_state_path  # only when needed: its import is not free

    return user_state_path(APP_NAME)


def control_socket_path(state_dir: Path) -> Path:
    """Where the supervisor of ``state_dir`` listens: ``<state_dir>/control.sock``."""
    return state_dir / CONTROL_SOCKET


def read_only_socket_path(state_dir: Path) -> Path:
    """Where its read-only socket is, when served: ``<state_dir>/control-ro.sock``."""
    return state_dir / READ_ONLY_SOCKET


def state_dir_of(config: RunConfig) -> Path:
    """The state directory of a loaded run file (module docstring)."""
    if config.managed is not None:
        return config.managed.data_root
    return default_state_dir()


def state_dir_of_file(path: Path) -> Path:
    """The state directory of the run file at ``path``, absolute, as `state_dir_of` finds
    it, read even when the rest of the file is invalid (edited, before a reload): only the
    TOML and ``managed.data_root`` must be sound. A relative data root starts from the run
    file's directory, as when it is loaded.

    Raises:
        InvalidConfig: the file cannot be read or is not TOML, or ``managed.data_root`` is
            not a string.
    """
    return _state_dir_of_data(path, _read(path))


def find_state_dir(
    config: Path | None,
    state_dir: Path | None,
    env: Mapping[str, str],
    cwd: Path,
) -> Path:
    """The state directory a command talks to: ``state_dir``, else ``config``'s, else
    `STATE_DIR_ENV`, else `CONFIG_ENV`'s, else the one run file of ``cwd`` (a ``*.toml``
    with ``[[instances]]``) whose supervisor's socket exists, else `default_state_dir`.

    Raises:
        InvalidConfig: both of a pair given (a run file and a state directory, as arguments
            or in the environment), a run file named is unusable, or several run files of
            ``cwd`` have a running supervisor (naming them).
    """
    if state_dir is not None and config is not None:
        raise InvalidConfig("give a run file or --state-dir, not both")
    if state_dir is not None:
        return state_dir
    if config is not None:
        return state_dir_of_file(config)
    from_env, config_env = env.get(STATE_DIR_ENV), env.get(CONFIG_ENV)
    if from_env and config_env:
        raise InvalidConfig(f"set {STATE_DIR_ENV} or {CONFIG_ENV}, not both")
    if from_env:
        return Path(from_env)
    if config_env:
        return state_dir_of_file(Path(config_env))
    return _running_here(cwd) or default_state_dir()


def _running_here(cwd: Path) -> Path | None:
    """The state directory of the one run file in ``cwd`` whose supervisor's socket
    exists, or None."""
    found: dict[Path, list[str]] = {}
    for path in sorted(cwd.glob("*.toml"))[:MAX_CANDIDATES]:
        try:
            data = _read(path)
        except InvalidConfig:
            continue  # not a run file we can read: not a candidate
        if not isinstance(data.get("instances"), list):
            continue
        try:
            where = _state_dir_of_data(path, data)
        except InvalidConfig:
            continue
        if control_socket_path(where).is_socket():
            found.setdefault(where, []).append(path.name)
    if len(found) > 1:
        names = "; ".join(f"{', '.join(files)} ({where})" for where, files in found.items())
        raise InvalidConfig(
            f"supervisors of several run files here are running: {names}; name one run file"
        )
    return next(iter(found), None)


def _read(path: Path) -> dict[str, Any]:
    from .toml_text import MAX_RUN_FILE_BYTES, parse_toml  # only a run file needs tomllib

    try:
        text = read_capped_text(path, MAX_RUN_FILE_BYTES, "run file")
    except OSError as error:
        raise InvalidConfig(f"{path}: cannot read the run file: {error.strerror}") from None
    return parse_toml(text, f"{path}: ")


def _state_dir_of_data(path: Path, data: dict[str, Any]) -> Path:
    managed: Any = data.get("managed")
    if not isinstance(managed, dict):
        return default_state_dir()
    data_root = managed.get("data_root")
    if not isinstance(data_root, str) or not data_root:
        raise InvalidConfig(f"{path}: $.managed.data_root: expected a path string")
    return path.resolve().parent / data_root
