"""Tests of issue 8 item 7, nothing of ours runs as root, on real processes: the version
probe runs as ``run_as`` with the servers' containment (``_edges/version_probe.py``), a
managed server gets its instance directory as HOME and a minimal PATH, and every child has
``PR_SET_NO_NEW_PRIVS`` (``_edges/spawn.py``), so a setuid program gains nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from edges.process_support import Launch, linux_only
from inferactors import InferConfig, InferFlavor, ManagedConfig, open_runtime
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.containment import resolve_run_as
from inferactors._edges.process import ManagedProcess
from inferactors._edges.version_probe import run_version_probe
from inferactors._policy.launch import DEFAULT_PATH
from inferactors._status import InstanceState
from support import Unprivileged

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")

WHO = "echo uid=$(id -ru) euid=$(id -u) $(grep NoNewPrivs /proc/self/status | tr -d '\\t')"


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].split()[0]
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if item)


@needs_root
async def test_the_version_probe_runs_as_run_as_with_no_new_privileges() -> None:
    nobody = resolve_run_as("nobody")
    found = await run_version_probe(("/bin/sh", "-c", WHO), run_as=nobody, euid=0)
    assert found == (True, f"uid={nobody.uid} euid={nobody.uid} NoNewPrivs:1")


async def test_as_root_without_run_as_the_probe_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    probe = ("/bin/sh", "-c", f"touch {marker}; echo v1")
    assert await run_version_probe(probe, run_as=None, euid=0) == (False, None)
    assert not marker.exists()


@needs_root
async def test_the_capability_probe_of_a_runtime_runs_the_server_program_as_nobody(
    server_dir: Path, unprivileged: Unprivileged
) -> None:
    """llama.cpp's default probe is ``<serve program> --version``: the program itself says
    which user ran it."""
    program = server_dir / "llama-server"
    program.write_text("#!/bin/sh\n" + WHO.replace("echo ", "echo version: $1 ", 1) + "\n")
    program.chmod(0o755)
    managed = ManagedConfig(
        registry=server_dir / "models.json",
        data_root=server_dir / "state",
        serve_program=program,
        run_as=unprivileged.run_as,
    )
    async with open_runtime(InferConfig.managing(InferFlavor.LLAMACPP, managed)) as runtime:
        capability, _ = await runtime.probe_capabilities()
    uid = resolve_run_as("nobody").uid
    assert capability.version == f"version: --version uid={uid} euid={uid} NoNewPrivs:1"


@needs_root
async def test_a_setuid_program_gains_nothing_in_a_managed_child(
    server_dir: Path, nursery: trio.Nursery
) -> None:
    """Without ``PR_SET_NO_NEW_PRIVS`` a setuid-root copy of ``id`` run by ``nobody`` would
    report euid 0; with it, the exec keeps the caller's ids."""
    setuid_id = server_dir / "id"
    shutil.copy("/usr/bin/id", setuid_id)
    setuid_id.chmod(0o4755)
    launch = Launch(Path("/bin/sh"), ("-c", f"exec {setuid_id} -u"), server_dir)
    nobody = resolve_run_as("nobody")
    process = await ManagedProcess.spawn(nursery, launch, run_as=nobody)
    evidence = await process.wait_exited()
    assert (evidence.exit_code, evidence.stdout.decode().strip()) == (0, str(nobody.uid))


@needs_root
async def test_a_managed_server_has_its_own_home_a_minimal_path_and_no_new_privileges(
    server_dir: Path,
    registry_path: Path,
    llama_server: Path,
    unprivileged: Unprivileged,
    free_port: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("PATH", f"/root/bin:{os.environ['PATH']}")
    managed = ManagedConfig(
        registry=registry_path,
        data_root=server_dir / "state",
        serve_program=llama_server,
        run_as=unprivileged.run_as,
    )
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=free_port)
    )
    config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    async with open_runtime(config, node_id="noroot") as runtime:
        handle = await runtime.load(spec)
        await runtime.start(handle)
        with trio.fail_after(60):
            status = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert status.pid is not None
        environ = environ_of(status.pid)
        nnp, uid = status_field(status.pid, "NoNewPrivs"), status_field(status.pid, "Uid")
    instance_dir = server_dir / "state" / handle.instance_id
    assert environ == {"PATH": DEFAULT_PATH, "HOME": str(instance_dir)}
    assert (nnp, uid) == ("1", str(resolve_run_as("nobody").uid))
