"""`inferactors run` proves a server with one token once it first serves, also when that
first settled state is Degraded but serving (issue 9): a slow first token made it Degraded
"slow: ...", never Running, and the run waited for Running for ever, saying nothing."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferactors.testing import FakeServerFaults, write_fake_server_program
from support import Unprivileged, run_as_line

RUN_FILE = """
node_id = "ci"

[managed]
registry = "{registry}"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "{server}" }}
{run_as}
[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port} }}
supervision = {{ slow_after_s = 0.5 }}
"""


def test_a_slow_first_token_still_gets_the_first_deep_health_line(
    server_dir: Path, registry_path: Path, free_port: int, unprivileged: Unprivileged
) -> None:
    program = write_fake_server_program(
        server_dir / "slow-fake",
        faults=FakeServerFaults(completion_delay_s=1.0),
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )
    run_file = server_dir / "run.toml"
    run_file.write_text(
        RUN_FILE.format(
            registry=registry_path,
            server=program,
            run_as=run_as_line(unprivileged.run_as),
            port=free_port,
        )
    )
    with subprocess.Popen(
        [sys.executable, "-m", "inferactors", "run", str(run_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as run:
        assert run.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(_first(s) for s in lines):
            lines.append(run.stdout.readline())
        run.send_signal(signal.SIGINT)
        rest, _ = run.communicate(timeout=30)
    said = "".join(lines)
    if not any(_first(s) for s in lines):
        pytest.fail("no first deep health line:\n" + said + rest)
    # the token takes the fault's 1.0 s, and a little more on a busy machine
    slow = re.search(r"-> degraded \(slow: first token in (\d+\.\d) s \(threshold 0\.5 s\)\)", said)
    assert slow is not None, said
    assert 1.0 <= float(slow[1]) < 5.0, said
    assert "-> running" not in said
    (line,) = [s for s in lines if _first(s)]
    assert "deep health: one token " in line, line


def _first(line: str) -> bool:
    """The run's first-deep-health line (passed or failed), not a `DeepHealthPassed`."""
    return "  deep health: " in line or "  deep health failed: " in line
