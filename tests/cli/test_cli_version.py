"""``inferactors --version`` (issue 19 item 5): the installed package's version, printed
without loading the rest of the command."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"inferactors {version('inferactors')}\n",
        "",
    )
