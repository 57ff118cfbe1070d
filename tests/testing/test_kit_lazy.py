"""The pytest plugin loads lazily (issue 19 item 7): pytest imports it in every session of
a project that installed the kit, so loading it imports nothing beyond pytest; a fixture
imports what it needs when a test first asks for it (``test_kit_fixtures.py`` runs them)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
import pytest
before = set(sys.modules)
import inferactors.testing.pytest_plugin
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_loading_the_plugin_imports_only_itself_and_its_packages() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [
        "inferactors",
        "inferactors.testing",
        "inferactors.testing.pytest_plugin",
    ]
