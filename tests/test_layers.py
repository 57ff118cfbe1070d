"""The layering of ``src/inferactors`` is a checked fact (design/README.md, "The map").

The check (`layering.check_package`) runs on the real package, and on copies of it broken
on purpose, one rule at a time, to show that it fails when a rule is broken.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import inferactors
from layering import VOCABULARY, check_package, cycles

PACKAGE = Path(inferactors.__file__).resolve().parent


def test_the_package_keeps_its_layers() -> None:
    assert check_package(PACKAGE) == []


def test_the_top_level_holds_only_the_vocabulary_and_the_folders() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert modules == sorted({"__init__", "__main__", *VOCABULARY}), (
        "a top-level module is shared vocabulary, named in layering.VOCABULARY; anything "
        "else belongs in a layer's folder"
    )
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert folders == [
        "_actors", "_cli", "_config", "_edges", "_models", "_policy", "_service", "testing"
    ]  # fmt: skip


LONG_MODULE_LINES = 600
"""A module this long is worth a look: it may hold two concepts. Split by concept, never to
fit a count; a module that is one concept all the same is named in `LONG_MODULES`."""

LONG_MODULES: dict[str, str] = {}
"""Modules over `LONG_MODULE_LINES` lines that were looked at, each with why it stays one."""


def test_a_long_source_module_was_looked_at() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > LONG_MODULE_LINES
    }
    assert set(long) <= set(LONG_MODULES), long


def test_no_test_file_is_over_500_lines() -> None:
    tests = Path(__file__).resolve().parent
    long = {
        str(path.relative_to(tests)): n
        for path in tests.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package's sources to break."""
    target = tmp_path / "inferactors"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    assert check_package(target) == []
    return target


def append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n" + code + "\n")


@pytest.mark.parametrize(
    ("module", "code", "expected"),
    [
        ("_policy/restart.py", "import trio", "(policy) imports the I/O library trio"),
        ("_policy/matching.py", "import httpx", "(policy) imports the I/O library httpx"),
        ("_policy/status.py", "import psutil", "(policy) imports the I/O library psutil"),
        ("_policy/launch.py", "import socket", "(policy) imports the I/O library socket"),
        ("_policy/exposure.py", "import subprocess", "imports the I/O library subprocess"),
        (
            "_policy/launch.py",
            "def f() -> None:\n    from .._edges import probe",
            "inferactors._policy.launch (policy) imports inferactors._edges.probe (edges)",
        ),
        (
            "_policy/matching.py",
            "from .._actors.mailbox import Mailbox",
            "inferactors._policy.matching (policy) imports inferactors._actors.mailbox (actors)",
        ),
        (
            "_edges/netcheck.py",
            "from .._actors.messages import Reply",
            "inferactors._edges.netcheck (edges) imports inferactors._actors.messages (actors)",
        ),
        (
            "_models/manifest.py",
            "from .._edges.probe import ProbeClient",
            "inferactors._models.manifest (models) imports inferactors._edges.probe (edges)",
        ),
        (
            "_actors/supervisor.py",
            "from .._cli.output import describe",
            "inferactors._actors.supervisor (actors) imports inferactors._cli.output (cli)",
        ),
        (
            "_actors/supervisor.py",
            "from .._service import fleet",
            "inferactors._actors.supervisor (actors) imports inferactors._service.fleet (service)",
        ),
        (
            "testing/_programs.py",
            "from .._service import fleet",
            "inferactors.testing._programs (testing) imports inferactors._service.fleet (service)",
        ),
        (
            "_service/fleet.py",
            "from .._cli.output import describe",
            "inferactors._service.fleet (service) imports inferactors._cli.output (cli)",
        ),
        (
            "_actors/runtime.py",
            "def go() -> None:\n    trio.run(lambda: None)",
            "inferactors._actors.runtime calls trio.run outside _cli",
        ),
        (
            "testing/_programs.py",
            "from trio import run",
            "inferactors.testing._programs calls trio.run outside _cli",
        ),
        ("_policy/privilege.py", "import pwd", "(policy) imports the I/O library pwd"),
        ("_policy/launch.py", "import select", "(policy) imports the I/O library select"),
        (
            "_policy/launch.py",
            "from .._models.registry_entries import threading",
            "imports the I/O library threading through inferactors._models.registry_entries",
        ),
        ("_policy/launch.py", "def f() -> str:\n    return open('x').read()", "calls open()"),
        ("_policy/status.py", "def f(p):\n    return p.read_text()", "calls read_text()"),
        (
            "_policy/launch.py",
            'if __name__ != "__main__":\n    import trio',
            "(policy) imports the I/O library trio",
        ),
        (
            "_policy/launch.py",
            'if __name__ == "__main__":\n    pass\nelse:\n    from .._actors import mailbox',
            "(policy) imports inferactors._actors.mailbox (actors)",
        ),
        (
            "_policy/launch.py",
            "import importlib\nX = importlib.import_module('inferactors._actors.runtime')",
            "(policy) imports inferactors._actors.runtime (actors)",
        ),
        (
            "_policy/launch.py",
            "X = __import__('inferactors._cli.main')",
            "(policy) imports inferactors._cli.main (cli)",
        ),
        (
            "_config/spec.py",
            "import inferactors._errors\nX = inferactors._actors.runtime.InferRuntime",
            "(config) imports inferactors._actors.runtime (actors)",
        ),
        (
            "_actors/runtime.py",
            "import trio as t\ndef go() -> None:\n    t.run(lambda: None)",
            "inferactors._actors.runtime calls trio.run outside _cli",
        ),
        (
            "_actors/runtime.py",
            "from trio import *",
            "inferactors._actors.runtime calls trio.run outside _cli",
        ),
        (
            "_actors/runtime.py",
            "X = getattr(trio, 'run')",
            "inferactors._actors.runtime calls trio.run outside _cli",
        ),
        (
            "_actors/runtime.py",
            "X = trio.lowlevel.start_guest_run",
            "inferactors._actors.runtime calls trio.run outside _cli",
        ),
        (
            "_actors/instance/step.py",
            "import trio",
            "inferactors._actors.instance.step (pure) imports the I/O library trio",
        ),
        (
            "_actors/instance/state.py",
            "def f() -> None:\n    from socket import socket",
            "inferactors._actors.instance.state (pure) imports the I/O library socket",
        ),
        (
            "_actors/ollama/step.py",
            "import httpx",
            "inferactors._actors.ollama.step (pure) imports the I/O library httpx",
        ),
        (
            "_actors/instance/status.py",
            "def f(p):\n    return p.read_text()",
            "inferactors._actors.instance.status (pure) calls read_text()",
        ),
        (
            "_actors/serving.py",
            "",  # serving imports runtime; make runtime import serving back
            "import circle: inferactors._actors.runtime -> inferactors._actors.serving",
        ),
    ],
)
def test_a_deliberate_break_fails_the_check(
    copy: Path, module: str, code: str, expected: str
) -> None:
    if not code:
        append(copy / "_actors/runtime.py", "from .serving import open_runtime")
    else:
        append(copy / module, code)
    problems = check_package(copy)
    assert any(expected in line for line in problems), problems


def test_an_import_under_a_main_guard_is_not_a_dependency(copy: Path) -> None:
    append(copy / "_policy/matching.py", 'if __name__ == "__main__":\n    import trio')
    assert check_package(copy) == []


def test_cycles_finds_every_circle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}, "g": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e", "f"]]
