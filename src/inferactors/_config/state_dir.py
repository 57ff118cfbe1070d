"""Where a supervisor keeps its control socket and logs: its state directory.

The run file's ``[managed] data_root`` when it has one, else ``~/.local/state/inferactors``
(`DEFAULT_STATE_DIR`, under the home directory of the user running it). The supervisor
(`state_dir_of`) and the commands that talk to it (`state_dir_of_file`) find it the same
way, so ``inferactors status config.toml`` reaches the supervisor of ``inferactors run
config.toml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import InvalidConfig
from .._untrusted_file import read_capped_text
from .convert import MAX_RUN_FILE_BYTES
from .convert import _parse_toml as parse_toml  # the loader's own checks (depth, size)
from .runfile import RunConfig

DEFAULT_STATE_DIR = Path("~/.local/state/inferactors")
"""The state directory of a run file without ``[managed]`` (``~`` expanded at use)."""


def default_state_dir() -> Path:
    """`DEFAULT_STATE_DIR` with ``~`` expanded."""
    return DEFAULT_STATE_DIR.expanduser()


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
    try:
        text = read_capped_text(path, MAX_RUN_FILE_BYTES, "run file")
    except OSError as error:
        raise InvalidConfig(f"{path}: cannot read the run file: {error.strerror}") from None
    data = parse_toml(text, f"{path}: ")
    managed: Any = data.get("managed")
    if not isinstance(managed, dict):
        return default_state_dir()
    data_root = managed.get("data_root")
    if not isinstance(data_root, str) or not data_root:
        raise InvalidConfig(f"{path}: $.managed.data_root: expected a path string")
    return path.resolve().parent / data_root
