"""Shared test support that is not a fixture: importable by any test module as ``support``
(``tests/`` is on ``sys.path`` through the root conftest), so folders may keep their own
``conftest.py`` without shadowing one another."""

from __future__ import annotations

import os
import random
from pathlib import Path

from inferactors.testing import Workspace

Unprivileged = Workspace
"""Where and as whom managed servers run in this test session: the kit's `Workspace`
(``run_as``, ``workspace``, ``python``, ``sys_path``, ``directory(name)``)."""


def _lan_stand_in() -> str:
    """A loopback address outside 127.0.0.0/24, drawn at random for this process."""
    draw = random.SystemRandom()
    return f"127.{draw.randrange(1, 255)}.{draw.randrange(256)}.{draw.randrange(1, 255)}"


LAN_ADDRESS = _lan_stand_in()
"""The address this test process's exposure checks take for "a LAN address" (the root
conftest sets ``INFERACTORS_LAN_ADDRESSES`` to it): a server bound to ``0.0.0.0`` answers
there, one bound to 127.0.0.1 does not. Every pytest process (each xdist worker) draws its
own, so a listener that another test session, or another worker, binds on its stand-in
address is never taken for one of ours beyond loopback."""


def own_state_dir_env(home: Path) -> dict[str, str]:
    """This environment, with ``home`` as the home and state home of a supervisor whose run
    file has no ``[managed]`` (its state directory: ``<home>/.local/state/inferactors``),
    so it has its control socket and lock to itself."""
    return {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / ".local" / "state")}


def run_as_line(run_as: str | None) -> str:
    """A run file's ``run_as = "..."`` line (newline included) for a workspace's ``run_as``;
    nothing for None (the suite is not root, and a supervisor that is not root runs its
    servers only as itself: a ``run_as`` of another user is refused)."""
    return "" if run_as is None else f'run_as = "{run_as}"\n'
