"""The README's fenced code blocks, and the checks each kind gets (issue 10 item 10)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import attrs
from starlette.applications import Starlette
from starlette.routing import Route

from inferactors._service.control_app import control_app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<text>.*?)^```\s*$", re.M | re.S)
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT)?\d\d:\d\d:\d\d\.\d{3}(\+\d\d:\d\d)?  \S")


@attrs.frozen
class Block:
    """One fenced block: its info string, its text, and the line its fence opens on."""

    lang: str
    text: str
    line: int

    @property
    def id(self) -> str:
        return f"{self.lang or 'output'}@{self.line}"


def readme_blocks(path: Path = README) -> list[Block]:
    """Every fenced code block of the README, in order."""
    text = path.read_text()
    return [
        Block(m["lang"], m["text"], text.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(text)
    ]


_OPERATORS = frozenset({">", ">>", "2>&1", "|", "&", "&&", ";", "<"})


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a ``sh`` block (comments and blank lines dropped), each split as a
    shell would, up to its first redirection, pipe or ``&``."""
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        cut = next((i for i, word in enumerate(words) if word in _OPERATORS), len(words))
        if words[:cut]:
            commands.append(words[:cut])
    return commands


def console_commands(text: str) -> list[tuple[list[str], list[str]]]:
    """A ``console`` block's ``$ command`` lines, each with the output lines shown after it."""
    session: list[tuple[list[str], list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            session.append((shell_commands(line[2:])[0], []))
        else:
            assert session, f"output before any command: {line!r}"
            session[-1][1].append(line)
    return session


def is_run_output_line(line: str) -> bool:
    """A line as ``inferactors run``/``demo`` print them: timestamped, or indented under
    one (the server's own lines, the evidence)."""
    return bool(_STAMP.match(line)) or line.startswith("    ")


def served_paths() -> set[str]:
    """The control app's route paths (the app is made over a stand-in fleet: only its
    start, stop and restart are looked up, and nothing is called)."""
    app = control_app(SimpleNamespace(start=None, stop=None, restart=None))
    assert isinstance(app, Starlette)
    return {route.path for route in app.routes if isinstance(route, Route)}
