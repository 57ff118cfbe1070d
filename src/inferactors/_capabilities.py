"""Capabilities: what a runtime can claim, only after a probe found it.

Source: seed-behaviour.md section 7, "Capabilities", and checklist items 32 to 35. Nothing
is claimed before `probe_capabilities` runs. A managed llama.cpp or mlx-lm runtime needs an
executable server program and, when a version probe is configured (llama.cpp: the server's
``--version`` by default), a zero exit from it; its first output line (at most 120
characters) is the version. An adopted runtime claims only a server that answers Up or
Loading on ``127.0.0.1`` at the probe port (a 500 or a dead port claims nothing).
"""

from __future__ import annotations

import os
import subprocess

import attrs
import trio

from ._config import InferConfig, ManagedConfig
from ._flavor import InferFlavor
from ._plan import ProberFactory, probe_once
from ._probe import Loading, Up

VERSION_PROBE_TIMEOUT_S = 5.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@attrs.frozen
class Capability:
    """One claimed capability: ``runtime.infer.<x>`` (with mode, formats, version) or
    ``format.<f>`` (name only)."""

    name: str
    mode: str | None = None
    formats: tuple[str, ...] = ()
    version: str | None = None


async def probe_capabilities(
    config: InferConfig, open_prober: ProberFactory
) -> tuple[Capability, ...]:
    """Probe what ``config``'s runtime can offer; empty when nothing answers."""
    if config.managed is not None and config.flavor is not InferFlavor.OLLAMA:
        found, version = await _managed_version(config.flavor, config.managed)
    else:
        found, version = await _server_answers(config, open_prober)
    if not found:
        return ()
    flavor = config.flavor
    formats = tuple(f.value for f in flavor.formats)
    runtime = Capability(flavor.capability, config.mode.value, formats, version)
    return (runtime, *(Capability(f"format.{name}") for name in formats))


async def _server_answers(
    config: InferConfig, open_prober: ProberFactory
) -> tuple[bool, str | None]:
    port = config.probe_port or config.flavor.default_port
    base = f"http://127.0.0.1:{port}"
    report = await probe_once(open_prober, base, config.probe_timeout_s, config.flavor)
    return isinstance(report.health, Up | Loading), report.version


async def _managed_version(flavor: InferFlavor, managed: ManagedConfig) -> tuple[bool, str | None]:
    program = managed.serve_program
    if program is None or not (program.is_file() and os.access(program, os.X_OK)):
        return False, None
    argv = managed.version_probe
    if argv is None and flavor is InferFlavor.LLAMACPP:
        argv = (str(program), "--version")
    if argv is None:
        return True, None
    return await _run_version_probe(argv)


async def _run_version_probe(argv: tuple[str, ...]) -> tuple[bool, str | None]:
    with trio.move_on_after(VERSION_PROBE_TIMEOUT_S):
        try:
            result = await trio.run_process(
                list(argv),
                env={"PATH": DEFAULT_PATH},
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        except OSError:
            return False, None
        if result.returncode != 0:
            return False, None
        return True, _first_line(result.stdout) or _first_line(result.stderr)
    return False, None


def _first_line(output: bytes) -> str | None:
    for line in output.decode(errors="replace").splitlines():
        if line.strip():
            return line.strip()[:120]
    return None
