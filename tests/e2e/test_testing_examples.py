"""The three downstream-style examples of examples/testing/ (issue 12, item 5) pass when run
from a directory of their own with ``python -m pytest``, no conftest, the plugin loaded by its
entry point: as ourselves, and (as root) as ``nobody``, with this environment's packages."""

from __future__ import annotations

import sys

import pytest

from e2e.testing_examples_support import NAMES, copy_example, interpreter_for, run_pytest, users
from inferactors.testing import Workspace
from inferactors.testing._workspace import importable_paths


@pytest.mark.parametrize("user", users(), ids=lambda user: user or "self")
@pytest.mark.parametrize("name", NAMES)
def test_an_example_passes_from_its_own_directory(
    name: str, user: str | None, inferactors_workspace: Workspace
) -> None:
    directory = copy_example(name, inferactors_workspace.directory("example"), user)
    python = interpreter_for(user, inferactors_workspace, sys.executable)
    python_path = importable_paths() if user is not None else ()
    done = run_pytest(python, directory, user, python_path=python_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
    assert "failed" not in done.stdout
    assert "skipped" not in done.stdout
