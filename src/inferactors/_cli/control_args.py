"""How a client command names its supervisor on the command line: ``[CONFIG.toml]``,
``--state-dir DIR`` and ``--timeout SECONDS``, parsed in any order, and the control socket
they lead to (`socket_of`). The exchange itself is `control_client.ControlClient`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from .._config.state_dir import CONFIG_ENV, STATE_DIR_ENV, control_socket_path, find_state_dir
from .._errors import InvalidConfig
from .control_client import EXIT_BAD_INPUT, ControlError


class IntermixedParser(argparse.ArgumentParser):
    """A parser whose options and positionals come in any order (``logs NAME -n 1
    CONFIG.toml``): argparse's own parser gives an optional positional only the words
    before the first option."""

    _parsing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._parsing:  # parse_known_intermixed_args calls back here, twice
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``[CONFIG.toml]`` and ``--state-dir DIR``: where to find the supervisor."""
    parser.add_argument(
        "config",
        nargs="?",
        type=Path,
        metavar="CONFIG.toml",
        help="the run file the supervisor runs (its state directory is found from it)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help=f"the supervisor's state directory (default: from CONFIG, else ${STATE_DIR_ENV}, "
        f"else ${CONFIG_ENV}'s, else a running run file of this folder, else "
        "$XDG_STATE_HOME/inferactors or ~/.local/state/inferactors)",
    )


def add_timeout_argument(parser: argparse.ArgumentParser, default_s: float) -> None:
    """``--timeout SECONDS``: how long the supervisor has to answer."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=default_s,
        metavar="SECONDS",
        help=f"how long the supervisor has to answer (default {default_s:g})",
    )


def positive_seconds(text: str) -> float:
    """An argument that is a positive, finite number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def socket_of(args: argparse.Namespace) -> Path:
    """The control socket of the supervisor the arguments name (`find_state_dir`: the run
    file or ``--state-dir``, the environment, the current folder, the default).

    Raises:
        ControlError: both given, or a run file is unusable (exit 2).
    """
    try:
        where = find_state_dir(args.config, args.state_dir, os.environ, Path.cwd())
    except InvalidConfig as error:
        raise ControlError(str(error), EXIT_BAD_INPUT, error.code) from None
    return control_socket_path(where)
