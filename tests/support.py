"""Shared test support that is not a fixture: importable by any test module as ``support``
(``tests/`` is on ``sys.path`` through the root conftest), so folders may keep their own
``conftest.py`` without shadowing one another."""

from __future__ import annotations

from inferactors.testing import Workspace

Unprivileged = Workspace
"""Where and as whom managed servers run in this test session: the kit's `Workspace`
(``run_as``, ``workspace``, ``python``, ``sys_path``, ``directory(name)``)."""
