"""Docstrings and comments point only to what a reader can open.

A rule that came from elsewhere is stated where it is used, or in ``design/``; it is never
only a tag that leads nowhere: the reference documents the project was built from are not
in the repository (``seed-behaviour.md``, ``style.md``, ``server-apis.md``,
``real-servers.md``), nor are its checklist or its tracker. The field-case ids (``FC-07``)
are the testing kit's own (``testing/_field_cases.py``), so only the kit names them. A
``name.py`` a docstring mentions is a module of the package or a file of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import inferactors

PACKAGE = Path(inferactors.__file__).resolve().parent
REPO = PACKAGE.parent.parent
NOWHERE = re.compile(
    r"seed-behaviou?r|style\.md|server-apis|real-servers|field-cases\.md|on-demand\.md"
    r"|checklist( items?)? \d|\b[Ii]ssue \d+ item|\([Ii]ssue \d+\)"
)
FIELD_CASE = re.compile(r"\bFC-\d+")
NAMED_FILE = re.compile(r"`+([\w/]+\.py)`+")


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_source_cites_what_a_reader_cannot_open() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NOWHERE.search(line)
        or (FIELD_CASE.search(line) and "testing" not in path.relative_to(PACKAGE).parts)
    ]
    assert found == []


def test_every_file_a_docstring_names_exists() -> None:
    known = {path.name for path in REPO.rglob("*.py") if ".venv" not in path.parts}
    missing = [
        f"{path.relative_to(PACKAGE)}:{number}: {name}"
        for path in sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for name in NAMED_FILE.findall(line)
        if Path(name).name not in known
    ]
    assert missing == []
