"""The README's front door session, run for real: its ``$`` commands in a fresh directory
holding ``examples/on_demand.toml``, the two tiny models registered as ``tiny`` and
``tiny2``, and ``clients.py`` (the README's Python block with the ``openai`` and ``ollama``
clients), the real llama-server, the README's ports swapped for free ones.

Like a person at a terminal, it lets the fleet settle before each command: the supervisor
answers, no instance is starting, stopping or serving a request, and a resident one has
been measured (its MEMORY column shows three figures).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from e2e.operate_session_support import free_ports, ported, session_env, shown_session
from e2e.readme_blocks_support import ROOT, readme_blocks
from inferactors.testing import write_tiny_gguf

EXAMPLE = ROOT / "examples" / "on_demand.toml"
PORTS = ("8800", "8090", "8091")
"""The README's ports: the front door's, then each server's."""
SETTLE_S = 60.0


def session_block() -> str:
    """The text of the README's front door ``console`` block."""
    (block,) = [
        b for b in readme_blocks() if b.lang == "console" and "run on_demand.toml" in b.text
    ]
    return block.text


def clients_block() -> str:
    """The README's ``clients.py``: the Python block with both clients."""
    (block,) = [b for b in readme_blocks() if b.lang == "python" and "ollama.Client" in b.text]
    return block.text


def shown() -> list[tuple[str, list[str]]]:
    """The session's ``$`` lines as written, with the output shown under each."""
    return shown_session(session_block())


def prepare(where: Path) -> dict[str, str]:
    """``on_demand.toml`` as written (free ports only: its llama-server and, as root, its
    ``run_as`` are the defaults ``inferactors run`` fills in), the two models
    registered in ``models.json`` as its comments say, and ``clients.py``, in ``where``;
    the README port -> the real one."""
    ports = dict(zip(PORTS, map(str, free_ports(len(PORTS))), strict=True))
    text = EXAMPLE.read_text()
    (where / "on_demand.toml").write_text(ported(text, ports))
    write_tiny_gguf(where / "tiny.gguf")
    write_tiny_gguf(where / "tiny2.gguf", seed=1, name="tiny-random-llama-2")
    for name in ("tiny", "tiny2"):
        (where / f"{name}.gguf").chmod(0o644)
        add = ["inferactors", "models", "add", f"{name}.gguf", "--name", name]
        subprocess.run(
            [*add, "--registry", "models.json"],
            cwd=where,
            env=session_env(),
            check=True,
            timeout=60,
        )
    (where / "clients.py").write_text(ported(clients_block(), ports))
    return ports


def settle(where: Path) -> None:
    """Wait until the fleet has settled (module docstring)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["inferactors", "status", "on_demand.toml", "--json"],
            cwd=where,
            env=session_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode == 0 and all(_settled(view) for view in json.loads(done.stdout)):
            return
        time.sleep(0.2)
    log = (where / "run.log").read_text(errors="replace")[-3000:]
    raise AssertionError(f"the fleet did not settle in {SETTLE_S} s; the run's log ends:\n{log}")


def _settled(view: dict[str, object]) -> bool:
    status, residency = view["status"], view["residency"]
    assert isinstance(status, dict)
    if not isinstance(residency, dict):
        return False  # the scheduler is not open yet
    if status["state"] not in ("loaded", "running", "exited") or residency["in_flight"]:
        return False
    where = residency["residency"]
    return where == "not-loaded" or (
        where == "resident" and residency["measured_bytes"] is not None
    )
