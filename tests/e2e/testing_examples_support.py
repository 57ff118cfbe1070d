"""Running the downstream-style examples of examples/testing/ as a downstream project would:
each copied to a directory of its own, run with ``python -m pytest`` in a subprocess, as
ourselves and (as root) as ``nobody``. Imported as ``e2e.testing_examples_support``."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from inferactors.testing import Workspace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "testing"
NAMES = ("retrying_client", "embedded_runtime", "ollama_client")
RUN_S = 300.0


def users() -> list[str | None]:
    """Whom to run the examples as: ourselves, and ``nobody`` when we are root."""
    return [None, "nobody"] if os.geteuid() == 0 else [None]


def copy_example(name: str, where: Path, user: str | None) -> Path:
    """A copy of example ``name`` in ``where``, owned by ``user`` (when given)."""
    target = where / name
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    if user is not None:
        for path in (where, target, *target.rglob("*")):
            shutil.chown(path, user)
    return target


def run_pytest(
    python: str,
    directory: Path,
    user: str | None,
    *,
    args: Sequence[str] = (),
    python_path: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -q -p no:cacheprovider ARGS`` in ``directory`` as ``user``, with a
    clean environment (``PYTHONPATH`` only when ``python_path`` is given)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(directory), "LANG": "C.UTF-8"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    who: dict[str, object] = {}
    if user is not None:
        who = {"user": user, "group": _group_of(user), "extra_groups": []}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_S,
        check=False,
        **who,
    )


def _group_of(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def interpreter_for(user: str | None, workspace: Workspace, ours: str) -> str:
    """The interpreter to run as ``user``: ``ours``, or one ``nobody`` can execute."""
    return ours if user is None else workspace.python
