"""The real mlx_lm.server, started by a test itself: shared by tests/e2e/test_mlx_server.py
and tests/actors/test_mlx_runtime.py (importable as ``mlx_support``, ``tests/`` being on
``sys.path``).

`readable_tiny_mlx` writes the tiny mlx model where a run_as user can read it, and
`broken_copy` one whose config asks for a layer the weights lack (its generation thread
dies at start, FC-07). `mlx_server` runs mlx_lm.server offline in its own session and kills
its group on exit; `wait_report` probes it until a condition (`is_up`, `unhealthy`) holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from inferactors import InferFlavor
from inferactors._edges.probe import ProbeClient
from inferactors._policy.probe_report import ServerReport, Unhealthy, Up
from inferactors.testing._tiny_mlx import write_tiny_mlx

READY_S = 60.0
"""Generous deadline for a server to come up on a loaded 2-core machine (it takes ~1.1 s)."""

STOP_S = 10.0


def readable_tiny_mlx(directory: Path) -> Path:
    """`write_tiny_mlx` into ``directory`` (made symlink-free), every file readable by all.

    safetensors writes ``model.safetensors`` with mode 0600, which a run_as user cannot
    read (inferactors' containment check refuses it); the other files get 0644.
    """
    written = write_tiny_mlx(directory.resolve())
    for path in written.iterdir():
        path.chmod(0o644)
    return written


def broken_copy(directory: Path) -> Path:
    """The tiny model (readable by all, at ``directory`` made symlink-free) with a config
    that asks for a third layer the weights do not have."""
    directory = readable_tiny_mlx(directory)
    config = json.loads((directory / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@attrs.frozen
class Server:
    process: trio.Process
    base_url: str
    spawned_at: float

    def since_spawn(self) -> float:
        return trio.current_time() - self.spawned_at


@asynccontextmanager
async def mlx_server(
    program: Path, model: Path, port: int, cache: Path, log: Path
) -> AsyncIterator[Server]:
    """mlx_lm.server on ``model`` (absolute, symlink-free) in its own session, offline;
    killed (its group) and reaped on exit."""
    argv = [str(program), "--model", str(model), "--host", "127.0.0.1"]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(log.parent),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
    }
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [*argv, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    server = Server(process, f"http://127.0.0.1:{port}", trio.current_time())
    try:
        yield server
    finally:
        if process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with trio.move_on_after(STOP_S) as scope:
            scope.shield = True
            await process.wait()


async def wait_report(
    probe: ProbeClient, server: Server, done: Callable[[ServerReport], bool]
) -> tuple[ServerReport, float, set[str]]:
    """Probe every 20 ms until ``done``; the report, seconds since spawn, health kinds seen."""
    seen: set[str] = set()
    with trio.fail_after(READY_S):
        while True:
            assert server.process.returncode is None, "mlx_lm.server exited while starting"
            report = await probe.report(InferFlavor.MLX_LM)
            seen.add(type(report.health).__name__)
            if done(report):
                return report, server.since_spawn(), seen
            await trio.sleep(0.02)


def is_up(report: ServerReport) -> bool:
    return isinstance(report.health, Up)


def unhealthy(report: ServerReport) -> bool:
    return isinstance(report.health, Unhealthy)
