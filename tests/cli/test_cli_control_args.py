"""Every form docs/control-api.md shows for the control commands parses, with options
before, between or after the positionals (``logs NAME -n 1 CONFIG.toml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferactors._cli.main import build_parser

RUN = "main.toml"

FORMS: list[tuple[str, dict[str, Any]]] = [
    ("status --json main.toml", {"json": True}),
    ("status main.toml --json", {"json": True}),
    ("status main.toml --timeout 2.5", {"timeout": 2.5}),
    ("start chat main.toml", {"name": "chat"}),
    ("stop chat --wait 30 main.toml", {"name": "chat", "wait": 30.0}),
    ("restart --timeout 3 chat main.toml", {"name": "chat", "timeout": 3.0}),
    ("logs chat -n 1 main.toml", {"name": "chat", "lines": 1}),
    ("logs chat -f main.toml", {"name": "chat", "follow": True}),
    ("logs chat -f -n 5 main.toml", {"name": "chat", "follow": True, "lines": 5}),
    ("logs -f chat main.toml -n 5", {"name": "chat", "follow": True, "lines": 5}),
    ("events -f main.toml", {"follow": True}),
    ("events -f -n 3 --json main.toml", {"follow": True, "count": 3, "json": True}),
    ("events main.toml -n 3", {"count": 3}),
    ("reload main.toml", {}),
    ("reload --wait 60 main.toml", {"wait": 60.0}),
    ("probe livez main.toml --timeout 2", {"endpoint": "livez", "timeout": 2.0}),
    ("probe --timeout 2 readyz/chat main.toml", {"endpoint": "readyz/chat"}),
]


@pytest.mark.parametrize(("form", "expected"), FORMS, ids=[form for form, _ in FORMS])
def test_each_documented_form_parses(form: str, expected: dict[str, Any]) -> None:
    args = build_parser().parse_args(form.split())
    assert args.config == Path(RUN)
    assert args.state_dir is None
    for key, value in expected.items():
        assert getattr(args, key) == value, key


@pytest.mark.parametrize(
    "form", ["logs chat -n 1 --state-dir d", "stop --state-dir d chat", "events --state-dir d -f"]
)
def test_the_state_dir_goes_anywhere_too(form: str) -> None:
    args = build_parser().parse_args(form.split())
    assert (args.state_dir, args.config) == (Path("d"), None)


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ("logs", "the following arguments are required: name"),
        ("logs chat main.toml extra", "unrecognized arguments: extra"),
        ("stop chat --wait 0", "expected a positive number of seconds, got '0'"),
        ("status --timeout nan", "expected a positive number of seconds, got 'nan'"),
    ],
)
def test_bad_forms_still_exit_2(form: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(form.split())
    assert exited.value.code == 2
    assert words in capsys.readouterr().err
