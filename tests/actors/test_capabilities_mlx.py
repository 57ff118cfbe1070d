"""Capabilities of a managed mlx-lm runtime: the mlx-lm version it records (issue 4, item 4;
checklist 35).

No server is started: the serve programs here are only read (their ``#!`` line) and the
interpreters they name are run as version probes, with a cleared environment and as the
servers' ``run_as`` (``nobody`` when the suite runs as root; issue 8 item 7), so every
program lives in a world-readable place and what a probe writes goes to a world-writable
directory. Stand-in
interpreters are small ``sh`` scripts that record their arguments, so a test can tell which
interpreter was asked and how.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from inferactors import Capability, InferConfig, InferFlavor, ManagedConfig, open_runtime
from inferactors._actors.capabilities import python_of
from inferactors._edges.containment import SEARCH, access_problem, resolve_run_as
from inferactors.testing import write_python_program

RUN_AS = "nobody" if os.geteuid() == 0 else None


@pytest.fixture
def place(server_dir: Path) -> Path:
    """A world-readable directory the probes' user can reach (``tmp_path`` is root's)."""
    return server_dir


needs_mlx = pytest.mark.skipif(
    find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed here (the dev extra installs it on Linux)",
)


def our_mlx() -> str:
    """What this environment's mlx-lm reports: ``mlx-lm 0.32.2``."""
    return f"mlx-lm {importlib.metadata.version('mlx-lm')}"


FORMATS = (Capability("format.mlx"), Capability("format.safetensors"))


def managed(place: Path, program: Path | None, probe: tuple[str, ...] | None = None) -> InferConfig:
    settings = ManagedConfig(
        registry=place / "models.json",
        data_root=place / "state",
        serve_program=program,
        version_probe=probe,
        run_as=RUN_AS,
    )
    return InferConfig.managing(InferFlavor.MLX_LM, settings)


def runtime_capability(version: str | None) -> Capability:
    return Capability(
        "runtime.infer.mlx-lm", mode="managed", formats=("mlx", "safetensors"), version=version
    )


async def probed(config: InferConfig) -> tuple[Capability, ...]:
    async with open_runtime(config) as runtime:
        assert runtime.provides() == (), "nothing is claimed before a probe"
        return await runtime.probe_capabilities()


def write_program(path: Path, text: str, mode: int = 0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def fake_python(directory: Path, *, prints: str, status: int = 0) -> tuple[Path, Path]:
    """An executable named ``python3`` that records its arguments (one per line), prints
    ``prints`` and exits with ``status``; returns it and its argument record."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o777)  # the probe runs as RUN_AS and writes its record here
    record = directory / "argv"
    script = (
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s\\n" "$a"; done > {shlex.quote(str(record))}\n'
        f"echo {shlex.quote(prints)}\n"
        f"exit {status}\n"
    )
    return write_program(directory / "python3", script), record


@needs_mlx
async def test_the_installed_mlx_lm_server_reports_its_package_version(place: Path) -> None:
    """The console script pip wrote (``#!<venv>/bin/python``) names this environment's
    interpreter, which knows mlx-lm's version, when the probe's user may run it; as root,
    the probe runs as ``nobody``, and a venv under ``/root`` claims nothing (no server of
    it could run either)."""
    program = Path(sys.executable).parent / "mlx_lm.server"
    interpreter = python_of(program)
    assert interpreter is not None, program.read_text()[:200]
    found = await probed(managed(place, program))
    user = resolve_run_as(RUN_AS) if RUN_AS else None
    if user is None or access_problem(user, Path(interpreter[0]), SEARCH) is None:
        assert found == (runtime_capability(our_mlx()), *FORMATS)
    else:
        assert found == ()


async def test_the_python_named_by_the_shebang_is_the_one_asked(place: Path) -> None:
    python, record = fake_python(place / "other-env", prints="mlx-lm 9.8.7")
    program = write_program(place / "serve", f"#!{python} -s\nimport mlx_lm\n")
    found = await probed(managed(place, program))
    assert found == (runtime_capability("mlx-lm 9.8.7"), *FORMATS)
    argv = record.read_text().splitlines()
    assert argv[:3] == ["-s", "-I", "-c"], argv
    assert "importlib.metadata" in argv[3]
    assert "'mlx-lm'" in argv[3]


async def test_an_interpreter_without_mlx_lm_claims_nothing(place: Path) -> None:
    """The shebang's Python cannot report mlx-lm's version (it is not installed there): the
    server could not run either, so nothing is claimed."""
    python, record = fake_python(place / "bare", prints="no module", status=1)
    program = write_program(place / "serve", f"#!{python}\n")
    assert await probed(managed(place, program)) == ()
    assert record.exists(), "the interpreter was not asked"


@needs_mlx
async def test_a_shell_wrapper_reports_the_version_of_our_own_environment(
    place: Path,
) -> None:
    """A ``sh`` wrapper (what tests use to run mlx_lm.server as an unprivileged user) names
    no Python: the version comes from inferactors' own environment."""
    program = write_python_program(
        place / "mlx_lm.server", entry="mlx_lm.server:main", python=sys.executable
    )
    assert program.read_text().startswith("#!/bin/sh\n")
    assert await probed(managed(place, program)) == (runtime_capability(our_mlx()), *FORMATS)


async def test_env_shebangs_are_followed_to_the_python_they_name(place: Path) -> None:
    python, _ = fake_python(place / "bin", prints="x")
    assert python_of(write_program(place / "a", "#!/usr/bin/env python3\n")) == (
        "/usr/bin/env",
        "python3",
    )
    assert python_of(write_program(place / "b", f"#! {python}  -E \n")) == (str(python), "-E")
    assert python_of(write_program(place / "c", "#!/usr/bin/env bash\n")) is None
    assert python_of(write_program(place / "d", "#!/bin/sh\nexec python3\n")) is None
    assert python_of(write_program(place / "e", "import sys  # no shebang\n")) is None
    assert python_of(write_program(place / "f", "#!\n")) is None
    (place / "elf").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(600))
    assert python_of(place / "elf") is None
    assert python_of(place / "missing") is None


@pytest.mark.parametrize("what", ["none", "missing", "not-executable", "directory"])
async def test_a_program_that_cannot_run_claims_nothing(place: Path, what: str) -> None:
    python, record = fake_python(place / "env", prints="mlx-lm 1.0")
    program = write_program(place / "serve", f"#!{python}\n", mode=0o644)
    chosen = {
        "none": None,
        "missing": place / "missing",
        "not-executable": program,
        "directory": place,
    }[what]
    assert await probed(managed(place, chosen)) == ()
    assert not record.exists(), "a version was asked of a program that cannot run"


async def test_a_configured_version_probe_wins_over_the_shebang(place: Path) -> None:
    python, record = fake_python(place / "env", prints="mlx-lm 1.0")
    program = write_program(place / "serve", f"#!{python}\n")
    probe = ("/bin/sh", "-c", "echo 'custom 4.5'")
    found = await probed(managed(place, program, probe))
    assert found == (runtime_capability("custom 4.5"), *FORMATS)
    assert not record.exists(), "the shebang's interpreter was asked despite a probe"
