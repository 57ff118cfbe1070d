"""The README as a newcomer runs it: its ``sh`` blocks in order, in a clone, as the user
running the suite (root here: the servers then run as ``nobody``, by default).

The clone is the checkout's tracked files (as they are in the working tree) committed in a
fresh git repository in a world-readable temporary folder; the README's ports in
``examples/run.toml`` are swapped for free ones just before ``inferactors run`` (a shared
machine has no fixed ports). ``HOME`` and the inferactors cache are temporary too (an empty
Ollama store and Hugging Face cache in it, for ``models import`` to read), and the
llama-server is the one the suite found (``INFERACTORS_LLAMA_SERVER``, as ``make demo``
leaves it). Every command of every ``sh`` block is run, except those `NOT_RUN_HERE` names
with the test that runs or parses them instead. Afterwards ``git status`` in the clone shows
nothing: every file a README step wrote is one the repository's ``.gitignore`` ignores. The
real checkout is left as it was.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.operate_session_support import free_ports, ported
from e2e.readme_blocks_support import ROOT, readme_blocks, shell_commands
from inferactors.testing import write_tiny_gguf
from support import Unprivileged

pytestmark = pytest.mark.llama_server

NOT_RUN_HERE = {
    "make demo": "builds a .venv of its own; what it runs, `inferactors demo`, is run here",
    "make test": "the suite itself",
    "inferactors models import llama-swap": "needs a llama-swap config.yaml of the reader's",
    ".venv/bin/python examples/all_flavors.py": "tests/e2e/test_examples.py runs it",
    "inferactors ui": "tests/e2e/test_web_page.py runs it beside the Operate session",
    "inferactors run operate.toml": "tests/e2e/test_web_page.py runs it",
    "umask 077": "the token file's recipe: tests/e2e/test_web_page.py runs it",
    "inferactors probe readyz --state-dir /var/lib/inferactors": "parsed: the Kubernetes probe",
}
"""Commands not run here (a prefix of the command's words -> where it is checked)."""
SYSTEM_INSTALL = "useradd"
"""A block holding this installs the systemd service as root on the machine itself:
tests/e2e/test_contrib.py parses it against the unit and its run file."""
RUN_PORTS = ("8090", "8091")
RUNNING_S = 120.0


def _skipped(words: list[str]) -> str | None:
    line = shlex.join(words)
    return next((why for start, why in NOT_RUN_HERE.items() if line.startswith(start)), None)


def _newcomer_blocks() -> list[list[list[str]]]:
    """The commands of each ``sh`` block a newcomer runs from a clone, in README order."""
    blocks = [b for b in readme_blocks() if b.lang == "sh" and SYSTEM_INSTALL not in b.text]
    return [shell_commands(block.text) for block in blocks]


def _clone(where: Path) -> Path:
    """The tracked files of the checkout, committed in a fresh repository at ``where``."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    subprocess.run(["git", "-C", str(where), "init", "-q"], check=True)
    _commit(where, "clone")
    return where


def _commit(repo: Path, message: str, what: str = "-A") -> None:
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", what], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)


def _free_ports_in_run_file(clone: Path) -> None:
    """``examples/run.toml`` on free ports instead of the README's, chosen just before it
    runs, as the clone's own (committed) text."""
    ports = dict(zip(RUN_PORTS, map(str, free_ports(len(RUN_PORTS))), strict=True))
    run_file = clone / "examples" / "run.toml"
    run_file.write_text(ported(run_file.read_text(), ports))
    _commit(clone, "free ports", str(run_file))


def _env(home: Path, llama_server: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFERACTORS_", "XDG_"))}
    return env | {
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "INFERACTORS_CACHE_DIR": str(home / "cache"),
        "INFERACTORS_LLAMA_SERVER": str(llama_server),
    }


def _status(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_newcomer_runs_the_readme_in_a_clone(
    server_dir: Path, llama_server: Path, unprivileged: Unprivileged
) -> None:
    before = _status(ROOT)
    clone = _clone(server_dir / "clone")
    home = server_dir / "home"
    for store in (".ollama/models/manifests", ".ollama/models/blobs", ".cache/huggingface/hub"):
        (home / store).mkdir(parents=True)
    env = _env(home, llama_server)
    ran: list[str] = []
    mine = clone / "my-model.gguf"  # the reader's own model (registered in place, never
    write_tiny_gguf(mine, seed=1)  # copied); theirs, so not the README's to keep ignored
    for commands in _newcomer_blocks():
        for words in commands:
            if _skipped(words) is None:
                ran.append(_run_step(clone, words, env, llama_server, unprivileged))
    assert ran[:2] == [
        "inferactors models import ollama",
        "inferactors models import hf-cache",
    ]
    assert "inferactors run examples/run.toml" in ran
    assert "inferactors demo" in ran
    mine.unlink()
    assert _status(clone) == "", "written where git sees it"
    assert _status(ROOT) == before


def _run_step(
    clone: Path, words: list[str], env: dict[str, str], server: Path, user: Unprivileged
) -> str:
    """Run one README command in ``clone``; return it as a line."""
    line = shlex.join(words)
    if words[:2] == ["inferactors", "run"]:
        _run_until_chat_runs(clone, words, env, user)
        return line
    done = subprocess.run(
        words, cwd=clone, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
    if words == ["inferactors", "llama-server"]:
        assert done.stdout.strip() == str(server)
    if words[:3] == ["inferactors", "models", "verify"]:
        assert "ok " in done.stdout, done.stdout
    return line


def _run_until_chat_runs(
    clone: Path, words: list[str], env: dict[str, str], user: Unprivileged
) -> None:
    """``inferactors run`` until its managed ``chat`` runs, then Ctrl-C: exit 0, having
    said the llama-server it found and, as root, who its servers run as."""
    _free_ports_in_run_file(clone)
    log = clone.parent / "run.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen(words, cwd=clone, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + RUNNING_S
        while "chat  degraded -> running" not in log.read_text():
            assert supervisor.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        supervisor.send_signal(signal.SIGINT)
        code = supervisor.wait(timeout=60)
    said = log.read_text()
    assert code == 0, said
    assert f"llama-server: {env['INFERACTORS_LLAMA_SERVER']} ($INFERACTORS_LLAMA_SERVER;" in said
    if user.run_as is not None:
        assert f"running as root: the servers run as user {user.run_as}" in said
