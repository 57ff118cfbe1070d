"""The field checks the configuration classes share: environment names and values,
``run_as``, positive durations (float seconds) and ports. Each raises `InvalidConfig`
naming the field it was given."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from .._errors import InvalidConfig, cut, shown

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]*\$?")
_IDS = re.compile(r"([0-9]+)(?::([0-9]+))?")


def check_env(field: str, env: Sequence[tuple[str, str]]) -> None:
    """Raise `InvalidConfig` (``field[i]``) for a bad name, a ``LLAMA_ARG_*`` name (llama-server
    reads those as flags) or a value containing NUL."""
    for index, (name, value) in enumerate(env):
        _check_env_name(f"{field}[{index}]", name)
        if "\x00" in value:
            raise InvalidConfig(f"{field}[{index}] ({cut(name)}) must not contain NUL")


def check_env_names(field: str, names: Sequence[str]) -> None:
    """Raise `InvalidConfig` (``field[i]``) for a name that is not ``[A-Za-z_][A-Za-z0-9_]*``
    or that starts with ``LLAMA_ARG_``."""
    for index, name in enumerate(names):
        _check_env_name(f"{field}[{index}]", name)


def _check_env_name(field: str, name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise InvalidConfig(f"{field} {shown(name)} is not a valid environment variable name")
    if name.startswith("LLAMA_ARG_"):
        raise InvalidConfig(
            f"{field} {cut(name)}: LLAMA_ARG_* variables are read by llama-server as flags; "
            "use serve.extra_args instead"
        )


def check_run_as(field: str, run_as: str | None) -> None:
    """Raise `InvalidConfig` unless ``run_as`` is None, a user name other than root, or
    ``uid[:gid]`` with uid (and gid) not 0 (a managed server never runs as root)."""
    if run_as is None:
        return
    ids = _IDS.fullmatch(run_as)
    if ids is not None:
        if int(ids.group(1)) == 0 or (ids.group(2) is not None and int(ids.group(2)) == 0):
            raise InvalidConfig(f"{field} must not be root (uid or gid 0)")
        return
    if not _USER_NAME.fullmatch(run_as) or len(run_as) > 32:
        raise InvalidConfig(f"{field} {shown(run_as)} is neither a user name nor uid[:gid]")
    if run_as == "root":
        raise InvalidConfig(f"{field} must not be root")


def check_positive(field: str, value: float) -> None:
    """Raise `InvalidConfig` naming ``field`` unless ``value`` is finite and above 0 (seconds)."""
    if not (math.isfinite(value) and value > 0):
        raise InvalidConfig(f"{field} must be a positive number of seconds, got {value}")


def check_port(field: str, port: int) -> None:
    """Raise `InvalidConfig` naming ``field`` unless ``port`` is in 1..65535."""
    if not 0 < port <= 65535:
        raise InvalidConfig(f"{field} {port} is outside 1..65535")


def check_port_range(field: str, ports: tuple[int, int]) -> None:
    """Raise `InvalidConfig` naming ``field`` unless ``ports`` is ``(lo, hi)`` with
    ``1 <= lo <= hi <= 65535``."""
    lo, hi = ports
    check_port(f"{field}[0]", lo)
    check_port(f"{field}[1]", hi)
    if lo > hi:
        raise InvalidConfig(f"{field} ({lo}, {hi}) is empty: lo must be <= hi")
