"""Capabilities of a managed mlx-lm runtime: the mlx-lm version it records (issue 4, item 4;
checklist 35).

No server is started: the serve programs here are only read (their ``#!`` line) and the
interpreters they name are run as version probes, with a cleared environment. Stand-in
interpreters are small ``sh`` scripts that record their arguments, so a test can tell which
interpreter was asked and how.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from inferactors import Capability, InferConfig, InferFlavor, ManagedConfig, open_runtime
from inferactors._actors.capabilities import python_of
from inferactors.testing import write_python_program

needs_mlx = pytest.mark.skipif(
    find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed here (the dev extra installs it on Linux)",
)


def our_mlx() -> str:
    """What this environment's mlx-lm reports: ``mlx-lm 0.32.2``."""
    return f"mlx-lm {importlib.metadata.version('mlx-lm')}"


FORMATS = (Capability("format.mlx"), Capability("format.safetensors"))


def managed(
    tmp_path: Path, program: Path | None, probe: tuple[str, ...] | None = None
) -> InferConfig:
    settings = ManagedConfig(
        registry=tmp_path / "models.json",
        data_root=tmp_path / "state",
        serve_program=program,
        version_probe=probe,
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
    record = directory / "argv"
    script = (
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s\\n" "$a"; done > {shlex.quote(str(record))}\n'
        f"echo {shlex.quote(prints)}\n"
        f"exit {status}\n"
    )
    return write_program(directory / "python3", script), record


@needs_mlx
async def test_the_installed_mlx_lm_server_reports_its_package_version(tmp_path: Path) -> None:
    """The console script pip wrote (``#!<venv>/bin/python``) names this environment's
    interpreter, which knows mlx-lm's version."""
    program = Path(sys.executable).parent / "mlx_lm.server"
    assert python_of(program) is not None, program.read_text()[:200]
    assert await probed(managed(tmp_path, program)) == (runtime_capability(our_mlx()), *FORMATS)


async def test_the_python_named_by_the_shebang_is_the_one_asked(tmp_path: Path) -> None:
    python, record = fake_python(tmp_path / "other-env", prints="mlx-lm 9.8.7")
    program = write_program(tmp_path / "serve", f"#!{python} -s\nimport mlx_lm\n")
    found = await probed(managed(tmp_path, program))
    assert found == (runtime_capability("mlx-lm 9.8.7"), *FORMATS)
    argv = record.read_text().splitlines()
    assert argv[:3] == ["-s", "-I", "-c"], argv
    assert "importlib.metadata" in argv[3]
    assert "'mlx-lm'" in argv[3]


async def test_an_interpreter_without_mlx_lm_claims_nothing(tmp_path: Path) -> None:
    """The shebang's Python cannot report mlx-lm's version (it is not installed there): the
    server could not run either, so nothing is claimed."""
    python, record = fake_python(tmp_path / "bare", prints="no module", status=1)
    program = write_program(tmp_path / "serve", f"#!{python}\n")
    assert await probed(managed(tmp_path, program)) == ()
    assert record.exists(), "the interpreter was not asked"


@needs_mlx
async def test_a_shell_wrapper_reports_the_version_of_our_own_environment(
    tmp_path: Path,
) -> None:
    """A ``sh`` wrapper (what tests use to run mlx_lm.server as an unprivileged user) names
    no Python: the version comes from inferactors' own environment."""
    program = write_python_program(
        tmp_path / "mlx_lm.server", entry="mlx_lm.server:main", python=sys.executable
    )
    assert program.read_text().startswith("#!/bin/sh\n")
    assert await probed(managed(tmp_path, program)) == (runtime_capability(our_mlx()), *FORMATS)


async def test_env_shebangs_are_followed_to_the_python_they_name(tmp_path: Path) -> None:
    python, _ = fake_python(tmp_path / "bin", prints="x")
    assert python_of(write_program(tmp_path / "a", "#!/usr/bin/env python3\n")) == (
        "/usr/bin/env",
        "python3",
    )
    assert python_of(write_program(tmp_path / "b", f"#! {python}  -E \n")) == (str(python), "-E")
    assert python_of(write_program(tmp_path / "c", "#!/usr/bin/env bash\n")) is None
    assert python_of(write_program(tmp_path / "d", "#!/bin/sh\nexec python3\n")) is None
    assert python_of(write_program(tmp_path / "e", "import sys  # no shebang\n")) is None
    assert python_of(write_program(tmp_path / "f", "#!\n")) is None
    (tmp_path / "elf").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(600))
    assert python_of(tmp_path / "elf") is None
    assert python_of(tmp_path / "missing") is None


@pytest.mark.parametrize("what", ["none", "missing", "not-executable", "directory"])
async def test_a_program_that_cannot_run_claims_nothing(tmp_path: Path, what: str) -> None:
    python, record = fake_python(tmp_path / "env", prints="mlx-lm 1.0")
    program = write_program(tmp_path / "serve", f"#!{python}\n", mode=0o644)
    chosen = {
        "none": None,
        "missing": tmp_path / "missing",
        "not-executable": program,
        "directory": tmp_path,
    }[what]
    assert await probed(managed(tmp_path, chosen)) == ()
    assert not record.exists(), "a version was asked of a program that cannot run"


async def test_a_configured_version_probe_wins_over_the_shebang(tmp_path: Path) -> None:
    python, record = fake_python(tmp_path / "env", prints="mlx-lm 1.0")
    program = write_program(tmp_path / "serve", f"#!{python}\n")
    probe = ("/bin/sh", "-c", "echo 'custom 4.5'")
    found = await probed(managed(tmp_path, program, probe))
    assert found == (runtime_capability("custom 4.5"), *FORMATS)
    assert not record.exists(), "the shebang's interpreter was asked despite a probe"
