"""The README's "Signed models" session is what the commands really do.

Every ``$`` line of the block between ``signed:begin`` and ``signed:end`` runs as shown, in a
fresh folder holding the tiny model, with a key made on the spot by ``openssl``: it exits 0
(1 for the failed verify, 2 for the refused add) and prints what the README shows once the
key digests (which differ at every run) and the folder are taken out.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.readme_blocks_support import README, console_commands

_SESSION = re.compile(r"<!-- signed:begin.*?-->\n```console\n(.*?)```\n<!-- signed:end -->", re.S)


def _shown() -> list[tuple[list[str], list[str]]]:
    match = _SESSION.search(README.read_text())
    assert match is not None, "the README has no Signed models session"
    return console_commands(match.group(1))


def _normalized(lines: list[str], folder: str = "/home/me/models") -> list[str]:
    out = []
    for line in lines:
        line = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<key>", line)
        line = re.sub(r"sha256:[0-9a-f]{16}\.\.\.", "sha256:<key>...", line)
        out.append(line.replace(folder, "<folder>"))
    return out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl program")
def test_the_signed_models_session_runs_as_the_readme_shows(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    shutil.copy2(tiny_gguf, tmp_path / "tiny.gguf")
    bin_dir = str(Path(sys.executable).parent)
    env = os.environ | {
        "INFERACTORS_REGISTRY": str(tmp_path / "models.json"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for words, shown in _shown():
        done = subprocess.run(
            words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        output = (done.stdout + done.stderr).splitlines()
        expected_status = 2 if shown and shown[0].startswith("inferactors: error") else 0
        if shown and shown[0].startswith("FAILED"):
            expected_status = 1
        command = shlex.join(words)
        assert done.returncode == expected_status, (command, output)
        assert _normalized(output, str(tmp_path)) == _normalized(shown), command
