"""The README's front door session, run as shown: ``inferactors run
examples/on_demand.toml`` (its paths and ports made local: the real llama-server, the
tiny model, free ports, the unprivileged user as root), then the README's Python block
with the ``openai`` and ``ollama`` clients, streaming included, against that one address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from cli.run_support import RunProcess
from e2e.readme_blocks_support import ROOT, readme_blocks
from support import Unprivileged

EXAMPLE = ROOT / "examples" / "on_demand.toml"
READY_S = 60.0


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run_file(where: Path, registry: Path, program: Path, unprivileged: Unprivileged) -> Path:
    text = EXAMPLE.read_text()
    for shown, real in (
        ('registry = "models.json"', f"registry = {str(registry)!r}"),
        ('data_root = "state"', f"data_root = {str(where / 'state')!r}"),
        ('"/usr/local/bin/llama-server"', repr(str(program))),
        ("port = 8800", "port = 0"),
        ("port = 8090", f"port = {_port()}"),
        ("port = 8091", f"port = {_port()}"),
    ):
        assert text.count(shown) == 1, shown
        text = text.replace(shown, real)
    if os.geteuid() == 0:
        text = text.replace("[managed]\n", f"[managed]\nrun_as = {unprivileged.run_as!r}\n")
    path = where / "on_demand.toml"
    path.write_text(text)
    return path


def _client_block() -> str:
    (block,) = [b for b in readme_blocks() if b.lang == "python" and "ollama.Client" in b.text]
    return block.text


def _until_resident(url: str) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        listed = httpx.get(url + "/v1/models").json()["data"]
        if all(model["status"]["value"] == "resident" for model in listed):
            return
        time.sleep(0.1)
    raise AssertionError(f"not resident within {READY_S} s: {listed}")


def test_the_readme_front_door_session_runs_as_shown(
    server_dir: Path, registry_path: Path, llama_server: Path, unprivileged: Unprivileged
) -> None:
    run = RunProcess.start(_run_file(server_dir, registry_path, llama_server, unprivileged))
    try:
        url = run.wait_for("front door listening on", READY_S).rsplit(" ", 1)[-1]
        _until_resident(url)
        code = _client_block()
        assert code.count('"http://127.0.0.1:8800"') == 1
        code = code.replace('"http://127.0.0.1:8800"', repr(url))
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "['chat', 'writer']"
        assert lines[3] == "['chat', 'writer']"
        said = [line.split(": ", 1) for line in lines if line.startswith(("chat:", "writer:"))]
        assert [who for who, _ in said] == ["chat", "writer", "writer", "chat"]
        assert all(text.strip() for _, text in said), lines  # the real model said something
        run.process.send_signal(signal.SIGTERM)
        assert run.finish() == 0
    finally:
        run.process.kill()
