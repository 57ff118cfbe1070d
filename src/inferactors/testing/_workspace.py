"""Where and as whom managed servers run in a test session, as root or not.

inferactors refuses to run a managed server as root (it needs ``run_as``), so as root a
test's servers run as ``nobody``: from a world-readable workspace under /tmp, with an
interpreter ``nobody`` can execute and this environment's packages on its ``sys.path``.
As a normal user they run as that user. `Workspace.create` arranges either case.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import attrs

from .._edges.containment import SEARCH, access_problem, resolve_run_as

UNPRIVILEGED_USER = "nobody"
"""The account managed servers run as when the tests run as root."""


class NoUsablePython(RuntimeError):
    """No interpreter of our Python version that the ``run_as`` user can execute."""


@attrs.frozen
class Workspace:
    """Where and as whom managed servers run in this test session.

    Attributes:
        run_as: the ``ManagedConfig.run_as`` to use (None when not root).
        workspace: a directory that ``run_as`` can read and search (mode 0755).
        python: an interpreter ``run_as`` can execute, of our Python's major.minor.
        sys_path: directories a server run by ``python`` needs on ``sys.path`` (this
            environment's site-packages, the directory holding ``inferactors``, then the
            rest of our ``sys.path``).
    """

    run_as: str | None
    workspace: Path
    python: str
    sys_path: tuple[str, ...]

    @classmethod
    def create(cls, parent: Path = Path("/tmp")) -> Workspace:
        """A fresh workspace under ``parent`` (which ``nobody`` must be able to search);
        remove it with `remove`.

        Raises:
            NoUsablePython: as root, no interpreter ``nobody`` can execute.
        """
        run_as = UNPRIVILEGED_USER if os.geteuid() == 0 else None
        workspace = Path(tempfile.mkdtemp(prefix="inferactors-tests-", dir=parent))
        workspace.chmod(0o755)
        paths = sysconfig.get_paths()
        package_root = str(Path(__file__).resolve().parents[2])
        ours = (paths["purelib"], paths["platlib"], package_root, *importable_paths())
        sys_path = tuple(dict.fromkeys(ours))
        try:
            return cls(run_as, workspace, server_python(run_as), sys_path)
        except NoUsablePython:
            shutil.rmtree(workspace, ignore_errors=True)
            raise

    def directory(self, name: str) -> Path:
        """A fresh world-readable directory under the workspace."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workspace))
        path.chmod(0o755)
        return path

    def remove(self) -> None:
        """Delete the workspace and everything in it."""
        shutil.rmtree(self.workspace, ignore_errors=True)


def importable_paths() -> tuple[str, ...]:
    """The directories of this process's ``sys.path`` but the standard library's (absolute;
    no zip files, no ``""``): what another interpreter of the same version needs, besides
    its own standard library, to import what we import."""
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    stdlib = {Path(base[name]).resolve() for name in ("stdlib", "platstdlib")}
    found = (Path(entry).resolve() for entry in sys.path if entry and Path(entry).is_dir())
    return tuple(str(path) for path in found if not _in_stdlib(path, stdlib))


def _in_stdlib(path: Path, stdlib: set[Path]) -> bool:
    packages = {"site-packages", "dist-packages"} & set(path.parts)
    return not packages and bool(stdlib & {path, *path.parents})


def server_python(run_as: str | None) -> str:
    """An interpreter of our major.minor version that ``run_as`` can execute: ours when
    ``run_as`` is None or can execute it, else a system one.

    Raises:
        NoUsablePython: none of ours, ``/usr/bin``'s, ``/usr/local/bin``'s or PATH's.
    """
    if run_as is None:
        return sys.executable
    user = resolve_run_as(run_as)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        sys.executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
        shutil.which(f"python{version}") or "",
    ]
    for candidate in candidates:
        usable = candidate and Path(candidate).exists()
        if usable and access_problem(user, Path(candidate), SEARCH) is None:
            return candidate
    raise NoUsablePython(
        f"no Python {version} interpreter that user {run_as} can execute (tried "
        f"{', '.join(c for c in candidates if c)}); servers run as an unprivileged user "
        "need one (apt-get install python3)"
    )
