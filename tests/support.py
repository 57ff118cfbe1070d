"""Shared test support that is not a fixture: importable by any test module as ``support``
(``tests/`` is on ``sys.path`` through the root conftest), so folders may keep their own
``conftest.py`` without shadowing one another."""

from __future__ import annotations

import tempfile
from pathlib import Path

import attrs


@attrs.frozen
class Unprivileged:
    """Where and as whom managed servers run in this test session.

    Attributes:
        run_as: the ``ManagedConfig.run_as`` to use (None when the suite is not root).
        workspace: a directory that ``run_as`` can read and search (mode 0755).
        python: an interpreter ``run_as`` can execute, of our Python's major.minor.
        sys_path: directories a server run by ``python`` needs on ``sys.path`` (this
            environment's site-packages and inferactors' source).
    """

    run_as: str | None
    workspace: Path
    python: str
    sys_path: tuple[str, ...]

    def directory(self, name: str) -> Path:
        """A fresh world-readable directory under the workspace."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workspace))
        path.chmod(0o755)
        return path
