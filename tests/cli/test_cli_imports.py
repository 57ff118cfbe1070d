"""The client commands import only what they need (issue 19 item 2): each one, run as the
console script runs it against a real control server (hypercorn on a Unix socket, over a
fake fleet), loads no event loop, no HTTP framework or server, no process or network
library, and (but for ``events``, which formats events) no attrs or cattrs. What the
import costs, next to ``curl --unix-socket``, is measured by ``bench/bench_cli_latency.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from inferactors._service.control_server import serve_control
from service.control_support import FakeFleet, crash

HEAVY = frozenset(
    {"trio", "httpx", "httpcore", "anyio", "hypercorn", "starlette", "h11", "h2",
     "prometheus_client", "psutil", "pyroute2", "blake3"}
)  # fmt: skip
"""Top-level packages no client command may load."""
MODELLED = frozenset({"attr", "attrs", "cattrs"})
"""Loaded only by ``events`` (its lines are the supervisor's own event descriptions)."""

COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["start", "chat", "--wait", "5"],
    ["stop", "chat"],
    ["restart", "embed"],
    ["logs", "chat", "-n", "2"],
    ["reload"],
    ["probe", "livez"],
    ["events", "-n", "3"],
]

# Runs the console script's entry point, then writes the modules it loaded to argv[1].
SCRIPT = """
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["inferactors", *sys.argv[2:]]
from _inferactors_boot import main
sys.exit(main())
"""


@pytest.fixture
async def fleet(tmp_path: Path, nursery: trio.Nursery) -> FakeFleet:
    served = FakeFleet()
    await nursery.start(partial(serve_control, served, state_dir=tmp_path))
    return served


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
async def test_a_client_command_loads_no_heavy_module(
    fleet: FakeFleet, tmp_path: Path, command: list[str]
) -> None:
    fleet.add_line("chat", "hello")
    fleet.add_event(crash())
    out = tmp_path / "modules.json"
    argv = [sys.executable, "-c", SCRIPT, str(out), *command, "--state-dir", str(tmp_path)]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode in (0, 1), done.stderr  # 1: a command the fake fleet refuses
    assert done.stdout or done.stderr.startswith(f"inferactors {command[0]}: ".encode())
    roots = {name.split(".")[0] for name in json.loads(out.read_text())}
    assert roots & HEAVY == set()
    if command[0] != "events":
        assert roots & MODELLED == set()


def test_the_whole_cli_still_loads_the_rest_for_other_commands(tmp_path: Path) -> None:
    """The full parser (``run``, ``models``, ...) is unchanged: ``--help`` lists them all."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for command in ("demo", "run", "status", "models", "probe", "llama-server", "events"):
        assert command in done.stdout


def test_version_loads_no_http_client_nor_the_control_commands(tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("inferactors "), done.stdout
    loaded = set(json.loads(out.read_text()))
    assert {"http.client", "ssl", "inferactors._cli.control"} & loaded == set()
