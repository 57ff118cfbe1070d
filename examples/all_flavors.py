"""One instance of each flavor under `inferactors run`, each proven with one real token.

    .venv/bin/python examples/all_flavors.py [WORK_DIR]

It writes the two tiny models, registers them (and an Ollama tag), starts the fake Ollama
(``python -m inferactors.testing.fake_ollama``; inferactors never starts a real Ollama),
writes a run file with a managed llama-server, a managed mlx_lm.server and a managed Ollama
model, runs ``inferactors run`` on it until all three have passed deep health, then stops
it with SIGINT. As root the servers run as ``nobody`` (inferactors refuses root), so the
work directory is world-readable and mlx_lm.server is run by an interpreter nobody can use.
Exit status 0 when all three reached Running and answered one token.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from inferactors._edges.llama_build import ensure_llama_server
from inferactors._models.registry import ModelRegistry
from inferactors.testing import write_python_program, write_tiny_gguf, write_tiny_mlx

DEADLINE_S = 120.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def mlx_program(work: Path, root: bool) -> Path:
    """The mlx_lm.server to run: ours, or as root a wrapper nobody can execute."""
    ours = Path(sys.executable).parent / "mlx_lm.server"
    if not root:
        return ours
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(f"python{version}", path="/usr/bin:/usr/local/bin") or sys.executable
    paths = sysconfig.get_paths()
    sys_path = [paths["purelib"], paths["platlib"]]
    return write_python_program(
        work / "mlx_lm.server", entry="mlx_lm.server:main", python=python, sys_path=sys_path
    )


def write_run_file(work: Path, *, llama: Path, mlx: Path, ports: dict[str, int]) -> Path:
    """The run file; no ``run_as``: as root ``inferactors run`` runs the servers as
    ``nobody``, else as the user who runs it."""
    text = f"""node_id = "example"

[managed]
registry = "models.json"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "{llama}", "infer.mlx-lm" = "{mlx}" }}

[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny-llama"
serve = {{ port = {ports["llama"]} }}

[[instances]]
mode = "managed"
role = "code"
runtime = "infer.mlx-lm"
model = "tiny-mlx"
serve = {{ port = {ports["mlx"]} }}

[[instances]]
mode = "managed"
role = "notes"
runtime = "infer.ollama"
model = "tiny-ollama"
serve = {{ port = {ports["ollama"]} }}
"""
    path = work / "run.toml"
    path.write_text(text)
    return path


def prepare(work: Path, root: bool) -> dict[str, int]:
    registry = ModelRegistry.open(work / "models.json")
    registry.add(write_tiny_gguf(work / "tiny-llama.gguf"), name="tiny-llama")
    mlx_dir = write_tiny_mlx(work / "tiny-mlx")
    mlx_dir.chmod(0o755)
    registry.add(mlx_dir, name="tiny-mlx")
    registry.add_ollama("tiny-ollama", "tiny:latest")
    return {"llama": free_port(), "mlx": free_port(), "ollama": free_port()}


def supervise(run_file: Path) -> tuple[int, int]:
    """Run ``inferactors run`` until three deep-health lines; returns (passed, exit status)."""
    command = [sys.executable, "-m", "inferactors", "run", str(run_file)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    passed, deadline = 0, time.monotonic() + DEADLINE_S
    try:
        while passed < 3 and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            print(line, end="", flush=True)
            passed += "deep health: one token" in line
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
        print(rest, end="")
    finally:
        process.kill()
    return passed, process.returncode


def main() -> int:
    root = os.geteuid() == 0
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="flavors-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    ports = prepare(work, root)
    run_file = write_run_file(
        work, llama=ensure_llama_server(), mlx=mlx_program(work, root), ports=ports
    )
    fake = [sys.executable, "-m", "inferactors.testing.fake_ollama"]
    ollama = subprocess.Popen([*fake, "--port", str(ports["ollama"]), "--model", "tiny:latest"])
    try:
        time.sleep(1.0)  # the fake Ollama starts listening
        passed, status = supervise(run_file)
    finally:
        ollama.terminate()
        ollama.wait(timeout=10)
    print(f"{passed} of 3 instances passed deep health; inferactors run exited {status}")
    return 0 if passed == 3 and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
