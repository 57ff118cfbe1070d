"""Capabilities: what a runtime can claim, only after a probe found it.

Nothing is claimed before `probe_capabilities` runs. A managed llama.cpp or mlx-lm runtime needs an
executable server program and, when a version probe is configured (llama.cpp: the server's
``--version`` by default), a zero exit from it; its first output line (at most 120
characters) is the version. mlx-lm's version is its package version:
asked of the Python the serve program's ``#!`` line names, else read from our own
environment. An adopted runtime claims only a server that answers Up or Loading on
``127.0.0.1`` at the probe port (a 500 or a dead port claims nothing).

Every probe program runs as the servers' ``run_as`` with their containment
(``_edges/version_probe.py``); as root without ``run_as`` nothing is run
and nothing is claimed, since no server could be started either.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import attrs
import trio

from .._config.config import ControlMode, InferConfig, ManagedConfig
from .._edges.containment import resolve_run_as
from .._edges.probe import ProberFactory, probe_once
from .._edges.version_probe import VERSION_PROBE_TIMEOUT_S, run_version_probe
from .._errors import InvalidConfig
from .._flavor import InferFlavor
from .._policy.probe_report import Busy, Loading, Up

MLX_PACKAGE = "mlx-lm"
"""The distribution whose version a managed mlx-lm runtime reports (``mlx-lm 0.32.2``)."""

_SHEBANG_LIMIT_BYTES = 512
_MLX_VERSION_CODE = (
    f"import importlib.metadata as m; print({MLX_PACKAGE!r}, m.version({MLX_PACKAGE!r}))"
)


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
    """Probe what ``config``'s runtime can offer; empty when nothing answers. A config of
    every flavor offers what each flavor's one-flavor config would: managed where it has
    a serve program (Ollama: managed settings), else an adopted server that answers."""
    if config.flavor is None:
        found: list[Capability] = []
        for flavor in InferFlavor:
            mode = ControlMode.ADOPTED
            if config.managed is not None and (
                flavor is InferFlavor.OLLAMA or config.serve_program(flavor) is not None
            ):
                mode = ControlMode.MANAGED
            for capability in await probe_capabilities(
                config.for_instance(flavor, mode), open_prober
            ):
                if capability not in found:
                    found.append(capability)
        return tuple(found)
    return await _one_flavor(config, config.flavor, open_prober)


async def _one_flavor(
    config: InferConfig, flavor: InferFlavor, open_prober: ProberFactory
) -> tuple[Capability, ...]:
    if config.managed is not None and flavor is not InferFlavor.OLLAMA:
        found, version = await managed_version(flavor, config.managed)
    else:
        found, version = await _server_answers(config, flavor, open_prober)
    if not found:
        return ()
    formats = tuple(f.value for f in flavor.formats)
    runtime = Capability(flavor.capability, config.mode.value, formats, version)
    return (runtime, *(Capability(f"format.{name}") for name in formats))


async def _server_answers(
    config: InferConfig, flavor: InferFlavor, open_prober: ProberFactory
) -> tuple[bool, str | None]:
    port = config.probe_port or flavor.default_port
    base = f"http://127.0.0.1:{port}"
    report = await probe_once(open_prober, base, config.probe_timeout_s, flavor)
    return isinstance(report.health, Up | Busy | Loading), report.version


async def managed_version(flavor: InferFlavor, managed: ManagedConfig) -> tuple[bool, str | None]:
    """Whether the managed serve program is there and runs, and its version line."""
    program = managed.serve_program
    if program is None or not (program.is_file() and os.access(program, os.X_OK)):
        return False, None
    argv = managed.version_probe
    if argv is None and flavor is InferFlavor.LLAMACPP:
        argv = (str(program), "--version")
    if argv is None and flavor is InferFlavor.MLX_LM:
        return await _mlx_version(program, managed)
    if argv is None:
        return True, None
    return await _run_version_probe(argv, managed)


async def _mlx_version(program: Path, managed: ManagedConfig) -> tuple[bool, str | None]:
    """mlx-lm's package version as ``"mlx-lm 0.32.2"``.

    A serve program whose ``#!`` line names a Python (``#!/venv/bin/python3``, or
    ``#!/usr/bin/env python3``) runs that interpreter, so that interpreter is asked, as a
    version probe: a non-zero exit (mlx-lm is not installed there) claims nothing. Any
    other program (a ``sh`` wrapper, say) is taken to run this environment's mlx-lm: its
    version from our own package metadata, or None when mlx-lm is not installed here.
    """
    interpreter = await trio.to_thread.run_sync(python_of, program)
    if interpreter is not None:
        return await _run_version_probe((*interpreter, "-I", "-c", _MLX_VERSION_CODE), managed)
    try:
        version = await trio.to_thread.run_sync(importlib.metadata.version, MLX_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return True, None
    return True, f"{MLX_PACKAGE} {version}"


def python_of(program: Path) -> tuple[str, ...] | None:
    """The interpreter argv of ``program``'s ``#!`` line when it runs Python, else None.

    ``#!/usr/bin/python3 -s`` gives ``("/usr/bin/python3", "-s")`` and ``#!/usr/bin/env
    python3`` gives ``("/usr/bin/env", "python3")``; a shell, a binary, an unreadable file
    or a Python named by neither form gives None. Reads at most 512 bytes (blocking I/O).
    """
    try:
        with program.open("rb") as stream:
            head = stream.read(_SHEBANG_LIMIT_BYTES)
    except OSError:
        return None
    first = head.split(b"\n", 1)[0]
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    named = words[1] if Path(words[0]).name == "env" and len(words) > 1 else words[0]
    return tuple(words) if Path(named).name.startswith("python") else None


async def _run_version_probe(
    argv: tuple[str, ...], managed: ManagedConfig
) -> tuple[bool, str | None]:
    """Run ``argv`` as the servers' ``run_as`` with their containment."""
    try:
        run_as = resolve_run_as(managed.run_as) if managed.run_as else None
    except InvalidConfig:
        return False, None
    timeout_s = VERSION_PROBE_TIMEOUT_S
    return await run_version_probe(argv, run_as=run_as, euid=os.geteuid(), timeout_s=timeout_s)
