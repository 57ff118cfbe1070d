"""``examples/crashing.out`` is what ``inferactors run examples/crashing.toml`` prints, and
the README shows it (issue 9, breaker's part 1: both still showed ``(reason: crash)``, the
model's path and ``restart budget spent`` long after the code said otherwise).

The example is run for real, as its README paragraph says (the broken file registered with
``inferactors models add``, the pinned llama-server as the user running the test, or as
``nobody`` when that is root); its meaningful lines (every line, the server's own included,
with times, pids, descriptor numbers, the port and backoff delays replaced by placeholders)
must be the ones in ``crashing.out``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
INFERACTORS = Path(sys.executable).with_name("inferactors")
GIVE_UP_S = 60.0
AS_ROOT = "running as root: the servers run as user nobody (the run file's [managed] names no"

_PLACEHOLDERS = (
    (re.compile(r"^(?:\d{4}-\d\d-\d\dT)?\d\d:\d\d:\d\d\.\d{3}(?:[+-]\d\d:\d\d  [A-Z]+ *)?  "), ""),
    (re.compile(r"process \d+"), "process <pid>"),
    (re.compile(r"/proc/self/fd/\d+"), "/proc/self/fd/<n>"),
    (re.compile(r"--alias \S+"), "--alias <file>"),
    (re.compile(r"--port \d+"), "--port <port>"),
    (re.compile(r"scheduled in \d+\.\d\d s"), "scheduled in <delay> s"),
    (
        re.compile(r"^llama-server: \S+ \(.*; the run file"),
        "llama-server: <found> (<how>; the run file",
    ),
)


def meaningful(text: str) -> list[str]:
    """Every non-empty line of a run's output, its variable parts replaced, except a
    probe's view of a server still starting ("degraded -> degraded (loading model)"):
    whether a probe lands in the few milliseconds before the broken server exits is timing;
    and the line a supervisor running as root says first (``running as root: the servers
    run as user nobody``): ``crashing.out`` is what a user who is not root sees."""
    lines = []
    for line in text.splitlines():
        for pattern, placeholder in _PLACEHOLDERS:
            line = pattern.sub(placeholder, line)
        if line.startswith(AS_ROOT):
            continue
        if line.strip() and "degraded -> degraded (" not in line:
            lines.append(line.rstrip())
    return lines


def example_in(where: Path, llama_server: Path, port: int) -> Path:
    """crashing.toml and its broken model, set up in ``where`` as the README says."""
    toml = (EXAMPLES / "crashing.toml").read_text()
    assert "serve_programs =" not in toml  # the llama-server `inferactors llama-server` finds
    assert "port = 18123" in toml
    toml = toml.replace("port = 18123", f"port = {port}")
    (where / "crashing.toml").write_text(toml)
    model = where / "broken.gguf"
    model.write_bytes(b"this is not a GGUF model\n")
    model.chmod(0o644)
    add = [str(INFERACTORS), "models", "add", "broken.gguf", "--name", "broken"]
    subprocess.run([*add, "--registry", "models.json"], cwd=where, check=True, timeout=60)
    return where / "crashing.toml"


def run_until_gave_up(run_file: Path, llama_server: Path) -> tuple[int, str]:
    """``inferactors run`` until it gives up and, nothing being left to supervise, exits
    by itself (issue 10 item 7; 78 since issue 18, a configuration error): its exit
    status and whole output."""
    done = subprocess.run(
        [str(INFERACTORS), "run", run_file.name],
        cwd=run_file.parent,
        env={**os.environ, "INFERACTORS_LLAMA_SERVER": str(llama_server)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=GIVE_UP_S,
        check=False,
    )
    return done.returncode, done.stdout


def test_crashing_out_is_what_the_example_prints(
    server_dir: Path, llama_server: Path, free_port: int
) -> None:
    shown = (EXAMPLES / "crashing.out").read_text()
    code, output = run_until_gave_up(example_in(server_dir, llama_server, free_port), llama_server)
    assert code == 78, output  # EX_CONFIG: a restart would only fail again
    assert (AS_ROOT in output) == (os.geteuid() == 0), output  # as root, as nobody
    assert meaningful(output) == meaningful(shown), output
    assert "(reason: start-up failure)" in shown
    assert "gave up after 1 restart(s): config-error: bad model file: " in shown


def test_the_readme_shows_crashing_out() -> None:
    assert (EXAMPLES / "crashing.out").read_text() in (ROOT / "README.md").read_text()
