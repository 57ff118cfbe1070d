"""docs/run-file.md is the reference of the run file's keys generated from the config
classes (issue 19 item 5): it is current, and every key the shipped examples use is in it,
in the table it belongs to."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

from inferactors._config.run_file_doc import render
from inferactors._config.runfile import RunConfig

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "run-file.md"


def test_the_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/run-file.md is stale: python -m inferactors._config.run_file_doc > docs/run-file.md"
    )


def _sections(text: str) -> dict[str, dict[str, str]]:
    """Each section's keys and their type column."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip("[]"), {})
        elif row := re.match(r"^\| `(\w+)` \| (.*?) \|", line):
            current[row[1]] = row[2]
    return sections


def _missing(data: dict[str, Any], where: str, sections: dict[str, dict[str, str]]) -> list[str]:
    keys = sections[where]
    missing = []
    for key, value in data.items():
        if key not in keys:
            missing.append(f"{where}: {key}")
            continue
        inner = key if where == "top level" else f"{where}.{key}"
        if keys[key] == "table":
            missing += _missing(value, inner, sections)
        elif keys[key] == "list of tables":
            for item in value:
                missing += _missing(item, inner, sections)
    return missing


def test_every_key_the_examples_use_is_documented_where_it_belongs() -> None:
    sections = _sections(DOC.read_text())
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert len(examples) >= 3
    for example in examples:
        data = tomllib.loads(example.read_text())
        assert _missing(data, "top level", sections) == [], example.name
    # and a key no table has is not there: the sections are the classes' fields
    assert "bogus" not in sections["top level"]
    assert set(sections["top level"]) == {f.name for f in attrs.fields(RunConfig)}
    assert sections["managed"]["registry"] == "path"
    assert sections["instances"]["mode"] == '"managed" or "adopted"'
